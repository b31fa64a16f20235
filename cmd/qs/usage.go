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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quicksilver-kv/qs/internal/gateway"
)

func init() {
	register("usage", "keys and bytes stored per producer: qs usage [--addr A] [--db D] [--producer P] [--json]", cmdUsage)
}

func cmdUsage(args []string) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7380", "HTTP address of a qs server (any node of the tree holds the same data)")
	db := fs.String("db", "default", "database name")
	producer := fs.String("producer", "", "report only this producer (cheaper: only its prefixes are read)")
	asJSON := fs.Bool("json", false, "print the server's JSON answer")
	timeout := fs.Duration("timeout", time.Minute, "request timeout (the server reads every key under the prefixes)")
	if _, err := parseArgs(fs, args, 0, "qs usage [flags]"); err != nil {
		return err
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimRight(base, "/") + "/v1/" + url.PathEscape(*db) + "/usage"
	if *producer != "" {
		u += "?producer=" + url.QueryEscape(*producer)
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
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	if *asJSON {
		_, err := os.Stdout.Write(body)
		return err
	}
	var rep gateway.UsageReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("usage answer: %w", err)
	}
	return printUsage(os.Stdout, rep)
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
	if r.Unowned != nil {
		fmt.Fprintf(tw, "(no producer)\t%d\t%d\t%d\n", r.Unowned.Keys, r.Unowned.KeyBytes, r.Unowned.ValueBytes)
	}
	fmt.Fprintf(tw, "(database)\t%d\t%d\t%d\n", r.Total.Keys, r.Total.KeyBytes, r.Total.ValueBytes)
	return tw.Flush()
}
