package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/gateway"
)

func init() {
	register("usage", "keys and bytes stored per producer, or keys never read (--unread): qs usage [--addr A] [--db D] [--producer P] [--unread [--window 24h] [--limit N]] [--json]", cmdUsage)
}

func cmdUsage(args []string) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7380", "HTTP address of a qs server (any node of the tree holds the same data)")
	db := fs.String("db", "default", "database name")
	producer := fs.String("producer", "", "report only this producer (cheaper: only its prefixes are read)")
	asJSON := fs.Bool("json", false, "print the server's JSON answer")
	unread := fs.Bool("unread", false, "list the keys with no sampled read within --window, per producer and prefix (ask the root: it collects the samples of the whole tree)")
	window := fs.Duration("window", 24*time.Hour, "with --unread: the window looked at (at most 168h)")
	limit := fs.Int("limit", 20, "with --unread: the most unread keys listed per prefix (0..10000)")
	timeout := fs.Duration("timeout", time.Minute, "request timeout (the server reads every key under the prefixes)")
	if _, err := parseArgs(fs, args, 0, "qs usage [flags]"); err != nil {
		return err
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimRight(base, "/") + "/v1/" + url.PathEscape(*db) + "/usage"
	q := url.Values{}
	if *producer != "" {
		q.Set("producer", *producer)
	}
	if *unread {
		q.Set("unread", "true")
		q.Set("window", window.String())
		q.Set("limit", strconv.Itoa(*limit))
	} else if flagSet(fs, "window") || flagSet(fs, "limit") {
		return usageErrorf("--window and --limit go with --unread")
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %w", base, answerError(resp.StatusCode, body))
	}
	if *asJSON {
		_, err := os.Stdout.Write(body)
		return err
	}
	if *unread {
		var rep gateway.UnreadReport
		if err := json.Unmarshal(body, &rep); err != nil {
			return fmt.Errorf("usage answer: %w", err)
		}
		return printUnread(os.Stdout, rep)
	}
	var rep gateway.UsageReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("usage answer: %w", err)
	}
	return printUsage(os.Stdout, rep)
}

// answerError is a server's error answer as the client package reports
// it: the code and message of its JSON body, or the body as text when it
// is not one.
func answerError(status int, body []byte) *client.Error {
	e := &client.Error{Status: status, Code: "http_" + strconv.Itoa(status), Message: strings.TrimSpace(string(body))}
	var j struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &j) == nil && j.Error.Code != "" {
		e.Code, e.Message = j.Error.Code, j.Error.Message
	}
	return e
}

// printUsage prints a report as a table: one line per producer, then one
// per prefix of it, then the unowned keys and the database's totals.
func printUsage(w io.Writer, r gateway.UsageReport) error {
	fmt.Fprintf(w, "database %s at index %d\n", r.DB, r.Index)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "producer / prefix\tkeys\tkey bytes\tvalue bytes\toverhead bytes\tstored bytes")
	line := func(name string, f gateway.Figures) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", name, f.Keys, f.KeyBytes, f.ValueBytes, f.OverheadBytes, f.StoredBytes)
	}
	for _, p := range r.Producers {
		line(p.Name, p.Figures)
		for _, pre := range p.Prefixes {
			line(fmt.Sprintf("  %q", pre.Prefix), pre.Figures)
		}
	}
	// The last two rows come from the store's running totals, which count
	// keys and bytes as written, not what they cost in the store: that
	// would take a pass over every key, so those cells say "-".
	counts := func(name string, c gateway.Counts) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t-\t-\n", name, c.Keys, c.KeyBytes, c.ValueBytes)
	}
	if r.Unowned != nil {
		counts("(no producer)", *r.Unowned)
	}
	counts("(database)", r.Total)
	return tw.Flush()
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// printUnread prints an unread report: one line per producer and prefix
// with its keys and those unread, then the first unread keys of each.
func printUnread(w io.Writer, r gateway.UnreadReport) error {
	fmt.Fprintf(w, "database %s at index %d: keys with no sampled read since %s (%s; one read in %d sampled)\n",
		r.DB, r.Index, r.Since, time.Duration(r.WindowSeconds*float64(time.Second)).Round(time.Second), r.SampleRate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "producer / prefix\tkeys\tunread\tfirst unread keys")
	line := func(name string, keys, unread int64, first []string) {
		quoted := make([]string, len(first))
		for i, k := range first {
			quoted[i] = strconv.Quote(k)
		}
		more := ""
		if first != nil && int64(len(first)) < unread {
			more = fmt.Sprintf(" (+%d)", unread-int64(len(first)))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s%s\n", name, keys, unread, strings.Join(quoted, " "), more)
	}
	for _, p := range r.Producers {
		line(p.Name, p.Keys, p.Unread, nil)
		for _, pre := range p.Prefixes {
			line(fmt.Sprintf("  %q", pre.Prefix), pre.Keys, pre.Unread, pre.UnreadKeys)
		}
	}
	if u := r.Unowned; u != nil {
		line("(no producer)", u.Keys, u.Unread, u.UnreadKeys)
	}
	return tw.Flush()
}
