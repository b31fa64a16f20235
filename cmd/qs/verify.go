package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/quicksilver-kv/qs/internal/store"
)

func init() {
	register("verify", "check the integrity of databases on disk (offline)", cmdVerify)
}

// Exit statuses of qs verify.
const (
	verifyExitProblems = 3 // the check ran and found problems
)

// verifyExit is an error carrying qs verify's exit status.
type verifyExit struct {
	code int
	msg  string
}

func (e *verifyExit) Error() string { return e.msg }
func (e *verifyExit) ExitCode() int { return e.code }

func cmdVerify(args []string) error {
	fl := flag.NewFlagSet("verify", flag.ContinueOnError)
	data := fl.String("data", "", "database directory, or data directory holding one database per subdirectory (required)")
	db := fl.String("db", "", "verify only this database of the data directory")
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), `usage: qs verify --data DIR [--db NAME]

Checks every value and chunk CRC, the log's blocks and hash chain, and the
stored counters of each database, reading it without changing anything.
The server must not be running on it (the database is locked).

Exit status: 0 clean, 3 problems found, 1 the check could not run.

`)
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	if *data == "" || fl.NArg() != 0 {
		fl.Usage()
		return flag.ErrHelp
	}
	dbs, err := findDatabases(*data, *db)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	problems, failed := 0, 0
	for _, d := range dbs {
		rep, err := store.Verify(store.Options{Name: d.name, Dir: d.dir, Logger: logger})
		switch {
		case errors.Is(err, store.ErrCorrupt):
			// The metadata is too damaged to open: that is a finding.
			fmt.Printf("database %s (%s)\n  problem: cannot open: %v\n", d.name, d.dir, err)
			problems++
			continue
		case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK):
			fmt.Fprintf(os.Stderr, "qs verify: %s: %v (the database is locked: stop the server using it first)\n", d.dir, err)
			failed++
			continue
		case err != nil:
			fmt.Fprintf(os.Stderr, "qs verify: %s: %v\n", d.dir, err)
			failed++
			continue
		}
		printVerifyReport(os.Stdout, rep)
		problems += rep.ProblemCount
	}
	switch {
	case failed > 0:
		return fmt.Errorf("%d of %d databases could not be checked", failed, len(dbs))
	case problems > 0:
		return &verifyExit{code: verifyExitProblems, msg: fmt.Sprintf("%d problems found", problems)}
	}
	return nil
}

type dbDir struct{ name, dir string }

// findDatabases resolves --data and --db: DIR itself if it is a database
// (it holds a Pebble MANIFEST), else every database subdirectory of DIR.
func findDatabases(data, name string) ([]dbDir, error) {
	if name != "" {
		dir := filepath.Join(data, name)
		if !isDatabaseDir(dir) {
			return nil, fmt.Errorf("no database %q in %s", name, data)
		}
		return []dbDir{{name, dir}}, nil
	}
	if isDatabaseDir(data) {
		return []dbDir{{filepath.Base(filepath.Clean(data)), data}}, nil
	}
	ents, err := os.ReadDir(data)
	if err != nil {
		return nil, err
	}
	var out []dbDir
	for _, e := range ents {
		if dir := filepath.Join(data, e.Name()); e.IsDir() && isDatabaseDir(dir) {
			out = append(out, dbDir{e.Name(), dir})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no database in %s (neither a database directory nor a data directory holding any)", data)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func isDatabaseDir(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "MANIFEST-") && !e.IsDir() {
			return true
		}
	}
	return false
}

func printVerifyReport(w io.Writer, r *store.VerifyReport) {
	fmt.Fprintf(w, "database %s (%s)\n", r.Name, r.Dir)
	fmt.Fprintf(w, "  id %s, applied index %d, hash %s\n", r.DBID, r.AppliedIndex, r.AppliedHash)
	fmt.Fprintf(w, "  keys %d (%d key bytes, %d value bytes)\n", r.Keys, r.KeyBytes, r.ValueBytes)
	fmt.Fprintf(w, "  chunked values %d (%d chunks, %d bytes; %d orphan chunks); values stored in the log %d\n", r.ChunkedValues, r.Chunks, r.ChunkBytes, r.OrphanChunks, r.InLogValues)
	fmt.Fprintf(w, "  log %d..%d (%d entries in %d blocks, %d bytes)\n", r.LogFirst, r.AppliedIndex, r.LogEntries, r.LogBlocks, r.LogBytes)
	if r.RetiredBlocks > 0 {
		fmt.Fprintf(w, "  retired log blocks %d (%d bytes), kept for the values they hold\n", r.RetiredBlocks, r.RetiredBytes)
	}
	if r.TailEntries > 0 {
		fmt.Fprintf(w, "  log tail: entries %d..%d (%d blocks) are durable in the log segments and are applied when the database is next opened\n", r.AppliedIndex+1, r.AppliedIndex+uint64(r.TailEntries), r.TailBlocks)
	}
	if r.Clean() {
		fmt.Fprintf(w, "  OK\n")
		return
	}
	fmt.Fprintf(w, "  %d problems:\n", r.ProblemCount)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
	if n := r.ProblemCount - len(r.Problems); n > 0 {
		fmt.Fprintf(w, "  ... and %d more\n", n)
	}
}
