package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"golang.org/x/term"
)

func init() {
	register("get", "read a key: qs get [--addr A] KEY", cmdGet)
	register("put", "write a key: qs put [--addr A] KEY VALUE (or VALUE from stdin with -)", cmdPut)
	register("del", "delete a key: qs del [--addr A] KEY", cmdDel)
	register("scan", "list keys: qs scan [--addr A] [--prefix P] [--limit N]", cmdScan)
	register("status", "show a database's status: qs status [--addr A]", cmdStatus)
	register("digest", "digest of a node's data, to compare replicas: qs digest [--addr A]", cmdDigest)
}

// clientFlags are the flags shared by the client commands.
type clientFlags struct {
	addr     *string
	db       *string
	timeout  *time.Duration
	minIndex *uint64
	token    *string // file holding the producer token of writes (else $QS_TOKEN)
}

func newClientFlags(fs *flag.FlagSet) clientFlags {
	return clientFlags{
		addr:     fs.String("addr", "127.0.0.1:7380", "HTTP address(es) of qs servers, comma-separated (reads fail over)"),
		db:       fs.String("db", "default", "database name"),
		timeout:  fs.Duration("timeout", 10*time.Second, "request timeout"),
		minIndex: fs.Uint64("min-index", 0, "read only once the server has applied this index"),
		token:    fs.String("token-file", "", "file holding the producer token sent with writes (default: $"+tokenEnv+")"),
	}
}

func (f clientFlags) client() (*client.Client, context.Context, context.CancelFunc, error) {
	o := client.Options{Database: *f.db, Timeout: *f.timeout}
	token, err := readToken(*f.token)
	if err != nil {
		return nil, nil, nil, err
	}
	if token != "" {
		o.Token = token
	}
	c, err := client.New(splitList(*f.addr), o)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *f.timeout)
	return c, ctx, cancel, nil
}

func (f clientFlags) read() client.ReadOptions {
	return client.ReadOptions{MinIndex: *f.minIndex}
}

func parseArgs(fs *flag.FlagSet, args []string, want int, usage string) ([]string, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() != want {
		return nil, usageErrorf("usage: %s", usage)
	}
	return fs.Args(), nil
}

func cmdGet(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	cf := newClientFlags(fs)
	verbose := fs.Bool("v", false, "print the key's index and the applied index to stderr")
	rest, err := parseArgs(fs, args, 1, "qs get [flags] KEY")
	if err != nil {
		return err
	}
	c, ctx, cancel, err := cf.client()
	if err != nil {
		return err
	}
	defer cancel()
	v, err := c.Get(ctx, rest[0], cf.read())
	if client.IsNotFound(err) {
		return exitError{code: 4, err: fmt.Errorf("key %q not found", rest[0])}
	}
	if err != nil {
		return err
	}
	if *verbose {
		fmt.Fprintf(os.Stderr, "index=%d applied_index=%d\n", v.Index, v.AppliedIndex)
	}
	_, err = os.Stdout.Write(valueOutput(v.Value, isTerminal(os.Stdout)))
	return err
}

// valueOutput is what qs get prints for value: the bytes as stored when
// stdout is a file or a pipe (so qs get k > file copies the value
// exactly), and a newline after a value that lacks one on a terminal (so
// the shell prompt starts on a line of its own).
func valueOutput(value []byte, terminal bool) []byte {
	if terminal && len(value) > 0 && value[len(value)-1] != '\n' {
		return append(value[:len(value):len(value)], '\n')
	}
	return value
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	return term.IsTerminal(int(f.Fd()))
}

func cmdPut(args []string) error {
	fs := flag.NewFlagSet("put", flag.ContinueOnError)
	cf := newClientFlags(fs)
	ifIndex := fs.Int64("if-index", -1, "compare-and-swap: write only if the key's index is this (0: key must not exist)")
	rest, err := parseArgs(fs, args, 2, "qs put [flags] KEY VALUE|-")
	if err != nil {
		return err
	}
	value := []byte(rest[1])
	if rest[1] == "-" {
		if value, err = io.ReadAll(os.Stdin); err != nil {
			return err
		}
	}
	c, ctx, cancel, err := cf.client()
	if err != nil {
		return err
	}
	defer cancel()
	res, err := c.Put(ctx, rest[0], value, optIndex(*ifIndex))
	if err != nil {
		return err
	}
	return printJSON(res)
}

func cmdDel(args []string) error {
	fs := flag.NewFlagSet("del", flag.ContinueOnError)
	cf := newClientFlags(fs)
	ifIndex := fs.Int64("if-index", -1, "compare-and-swap: delete only if the key's index is this")
	rest, err := parseArgs(fs, args, 1, "qs del [flags] KEY")
	if err != nil {
		return err
	}
	c, ctx, cancel, err := cf.client()
	if err != nil {
		return err
	}
	defer cancel()
	res, err := c.Delete(ctx, rest[0], optIndex(*ifIndex))
	if err != nil {
		return err
	}
	return printJSON(res)
}

func cmdScan(args []string) error {
	fs := flag.NewFlagSet("scan", flag.ContinueOnError)
	cf := newClientFlags(fs)
	prefix := fs.String("prefix", "", "key prefix")
	start := fs.String("start", "", "first key (inclusive)")
	limit := fs.Int("limit", 0, "most keys to list (0: all, fetched page by page)")
	values := fs.Bool("values", false, "print values too (key<TAB>index<TAB>value)")
	if _, err := parseArgs(fs, args, 0, "qs scan [flags]"); err != nil {
		return err
	}
	c, ctx, cancel, err := cf.client()
	if err != nil {
		return err
	}
	defer cancel()
	ro := cf.read()
	n := 0
	from := *start
	for {
		page := 1000
		if *limit > 0 && *limit-n < page {
			page = *limit - n
		}
		res, err := c.Scan(ctx, *prefix, from, page, ro)
		if err != nil {
			return err
		}
		// Later pages are read at least at the first page's index.
		ro.MinIndex = max(ro.MinIndex, res.Index)
		for _, it := range res.Items {
			if *values {
				fmt.Printf("%s\t%d\t%s\n", it.Key, it.Index, it.Value)
			} else {
				fmt.Printf("%s\t%d\n", it.Key, it.Index)
			}
			n++
		}
		if res.Next == nil || (*limit > 0 && n >= *limit) {
			return nil
		}
		from = *res.Next
	}
}

func cmdStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	cf := newClientFlags(fs)
	if _, err := parseArgs(fs, args, 0, "qs status [flags]"); err != nil {
		return err
	}
	c, ctx, cancel, err := cf.client()
	if err != nil {
		return err
	}
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	return printJSON(st)
}

// cmdDigest prints the digest of each server named by --addr, one line
// each, and exits 5 when they differ (each server read at --min-index or
// later; servers at different indexes after the same last write agree).
func cmdDigest(args []string) error {
	fs := flag.NewFlagSet("digest", flag.ContinueOnError)
	cf := newClientFlags(fs)
	if _, err := parseArgs(fs, args, 0, "qs digest [flags]"); err != nil {
		return err
	}
	var first string
	differ := false
	for _, addr := range splitList(*cf.addr) {
		one := cf
		one.addr = &addr
		c, ctx, cancel, err := one.client()
		if err != nil {
			return err
		}
		d, err := c.Digest(ctx, cf.read())
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		fmt.Printf("%s index=%d keys=%d sha256=%s\n", addr, d.Index, d.Keys, d.SHA256)
		if first == "" {
			first = d.SHA256
		} else if d.SHA256 != first {
			differ = true
		}
	}
	if differ {
		return exitError{code: 5, err: fmt.Errorf("digests differ")}
	}
	return nil
}

func optIndex(i int64) *uint64 {
	if i < 0 {
		return nil
	}
	u := uint64(i)
	return &u
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// exitError carries a specific exit status (4: key not found).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }
func (e exitError) ExitCode() int { return e.code }
