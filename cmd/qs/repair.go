package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

func init() {
	register("repair", "set a replica's damaged or forked database aside, so it bootstraps again at the next start (offline)", cmdRepair)
}

func cmdRepair(args []string) error {
	fl := flag.NewFlagSet("repair", flag.ContinueOnError)
	data := fl.String("data", "", "data directory of the node (required)")
	db := fl.String("db", "default", "the database to repair")
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), `usage: qs repair --data DIR [--db NAME]

Sets the database's directory aside (renamed NAME.repaired-TIME, nothing
deleted), for a replica whose log forked from its source's (status
"state": "forked") or whose data is damaged beyond serving. At its next
start the node bootstraps the database again from its sources, as a new
replica does. The server must not be running on it. Never use it on a
root: a root's data exists nowhere else.

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
	dir := dbs[0].dir
	if _, err := os.Stat(filepath.Join(*data, *db+".raft")); err == nil {
		return fmt.Errorf("qs repair: %s is a member of an HA root (it has %s.raft): replace the member instead (docs/operations.md, \"Replacing a member\")", *db, *db)
	}
	// Opening the store takes its lock: a running server holds it.
	st, err := store.Open(store.Options{Name: *db, Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), BallastBytes: -1})
	if errors.Is(err, store.ErrInUse) {
		return fmt.Errorf("qs repair: %s: %w", dir, err)
	}
	var applied uint64
	if err == nil {
		applied = st.AppliedIndex()
		if err := st.Close(); err != nil {
			return fmt.Errorf("qs repair: close %s: %w", dir, err)
		}
	}
	aside := fmt.Sprintf("%s.repaired-%s", dir, time.Now().UTC().Format("20060102T150405Z"))
	if err := os.Rename(dir, aside); err != nil {
		return fmt.Errorf("qs repair: %w", err)
	}
	// The rename is durable only once the parent directory is synced: a
	// power loss before that would bring the forked database back.
	d, err := os.Open(filepath.Dir(dir))
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return fmt.Errorf("qs repair: %s set aside in %s, but syncing %s failed: %w", dir, aside, filepath.Dir(dir), err)
	}
	fmt.Printf("database %s (applied index %d) set aside in %s\nstart qs serve again: it bootstraps %s from its sources; remove %s once you no longer need it\n",
		*db, applied, aside, *db, aside)
	return nil
}
