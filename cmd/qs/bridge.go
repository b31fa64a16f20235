package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/bridge"
	"github.com/quicksilver-kv/qs/internal/bridge/etcdbridge"
	"github.com/quicksilver-kv/qs/internal/bridge/pgbridge"
	"github.com/quicksilver-kv/qs/internal/bridge/qsbridge"
	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

// bridgeMetrics counts for the bridge this process runs (qs bridge),
// served at its /metrics. It is registered when the process starts, so
// every qs process exports its series (at 0 unless it runs a bridge).
var bridgeMetrics = metrics.MustRegister(bridge.NewMetrics())

func init() {
	register("bridge", "copy a system of record into a root and follow its changes: qs bridge postgres|etcd|qs [flags]", cmdBridge)
}

// bridgeSources are the sources qs bridge knows, by name.
var bridgeSources = map[string]func(args []string) error{
	"postgres": cmdBridgePostgres,
	"etcd":     cmdBridgeEtcd,
	"qs":       cmdBridgeQS,
}

func cmdBridge(args []string) error {
	if len(args) == 0 {
		return usageErrorf("usage: qs bridge postgres|etcd|qs [flags] (qs bridge SOURCE -h for the flags)")
	}
	run, ok := bridgeSources[args[0]]
	if !ok {
		return usageErrorf("unknown bridge source %q (known: postgres, etcd, qs)", args[0])
	}
	return run(args[1:])
}

// bridgeFlags are the flags every bridge takes: where to write, and where
// to serve its metrics.
type bridgeFlags struct {
	to, db, tokenFile, metricsAddr, logLevel *string
	timeout                                  *time.Duration
}

func newBridgeFlags(fs *flag.FlagSet) bridgeFlags {
	return bridgeFlags{
		to:          fs.String("to", "", "HTTP address(es) of the root, comma-separated (every member of an HA root)"),
		db:          fs.String("db", "default", "qs database to write"),
		tokenFile:   fs.String("token-file", "", "file holding the producer token of the writes (default: $"+tokenEnv+")"),
		metricsAddr: fs.String("metrics", "", "address to serve /metrics on (port 0: a free port, announced on stdout); empty: none"),
		logLevel:    fs.String("log-level", "info", "debug, info, warn or error"),
		timeout:     fs.Duration("timeout", 10*time.Second, "timeout of each request to qs"),
	}
}

func (f bridgeFlags) client() (*client.Client, error) {
	if *f.to == "" {
		return nil, errors.New("--to is required")
	}
	token, err := readToken(*f.tokenFile)
	if err != nil {
		return nil, err
	}
	return client.New(splitList(*f.to), client.Options{Database: *f.db, Timeout: *f.timeout, Token: token, WriteAttempts: 5})
}

// run runs a bridge until SIGINT or SIGTERM, serving its metrics
// meanwhile.
func (f bridgeFlags) run(bridge func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := f.serveMetrics(ctx); err != nil {
		return err
	}
	return bridge(ctx)
}

// serveMetrics serves /metrics on addr until ctx ends.
func (f bridgeFlags) serveMetrics(ctx context.Context) error {
	if *f.metricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", *f.metricsAddr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	fmt.Printf("metrics listening on %s\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return nil
}

// parseOnlyFlags parses args with parseFlags (a bad flag is printed once,
// as a usage error) and refuses positional arguments.
func parseOnlyFlags(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

func cmdBridgePostgres(args []string) error {
	fs := flag.NewFlagSet("bridge postgres", flag.ContinueOnError)
	bf := newBridgeFlags(fs)
	var (
		dsn    = fs.String("dsn", "", "PostgreSQL connection string (URL or key=value; default: $QS_PG_DSN)")
		table  = fs.String("table", "", "table to copy: TABLE or SCHEMA.TABLE")
		keyCol = fs.String("key-column", "", "the table's primary key column; each row's key is PREFIX + its text")
		prefix = fs.String("prefix", "", "qs key prefix of the rows")
		slot   = fs.String("slot", "", "replication slot, created if missing (default qs_TABLE)")
		pub    = fs.String("publication", "", "publication, created if missing (default: the slot's name)")
		state  = fs.String("state-key", "", "qs key holding the bridge's position (default _bridge/SLOT); must be writable by the token")
		batch  = fs.Int("copy-batch", 5000, "rows per qs batch during the initial copy (at most the root's max_batch_ops)")
		resync = fs.Bool("resync", false, "drop the slot if any, create it again and copy the whole table, deleting keys of rows gone: the recovery from a lost slot")
	)
	if err := parseOnlyFlags(fs, args); err != nil {
		return err
	}
	if *dsn == "" {
		*dsn = os.Getenv("QS_PG_DSN")
	}
	if *dsn == "" || *table == "" || *keyCol == "" {
		return errors.New("--dsn (or $QS_PG_DSN), --table and --key-column are required")
	}
	c, err := bf.client()
	if err != nil {
		return err
	}
	b, err := pgbridge.New(pgbridge.Config{
		DSN: *dsn, Table: *table, KeyColumn: *keyCol, Prefix: *prefix, Slot: *slot, Publication: *pub,
		StateKey: *state, Client: c, Resync: *resync, CopyBatch: *batch,
		Progress: os.Stderr, Log: newLogger(*bf.logLevel), Metrics: bridgeMetrics,
	})
	if err != nil {
		return err
	}
	return bf.run(b.Run)
}

func cmdBridgeEtcd(args []string) error {
	fs := flag.NewFlagSet("bridge etcd", flag.ContinueOnError)
	bf := newBridgeFlags(fs)
	var (
		endpoints = fs.String("endpoints", "127.0.0.1:2379", "etcd client URLs, comma-separated")
		prefix    = fs.String("prefix", "", "etcd key prefix to copy (empty: every key)")
		toPrefix  = fs.String("to-prefix", "", "qs prefix replacing --prefix in the keys (default: the same keys)")
		state     = fs.String("state-key", "", "qs key holding the bridge's revision (default _bridge/etcd/PREFIX); must be writable by the token")
		batch     = fs.Int("copy-batch", 5000, "keys per qs batch during the copy (at most the root's max_batch_ops)")
		resync    = fs.Bool("resync", false, "copy the prefix again whatever revision qs holds, deleting keys gone from etcd: the recovery after etcd compacted past it")
	)
	if err := parseOnlyFlags(fs, args); err != nil {
		return err
	}
	c, err := bf.client()
	if err != nil {
		return err
	}
	cfg := etcdbridge.Config{
		Endpoints: splitList(*endpoints), Prefix: *prefix, StateKey: *state, Client: c, Resync: *resync,
		CopyBatch: *batch, Progress: os.Stderr, Log: newLogger(*bf.logLevel), Metrics: bridgeMetrics,
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "to-prefix" {
			cfg.ToPrefix = toPrefix
		}
	})
	b, err := etcdbridge.New(cfg)
	if err != nil {
		return err
	}
	return bf.run(b.Run)
}

func cmdBridgeQS(args []string) error {
	fs := flag.NewFlagSet("bridge qs", flag.ContinueOnError)
	bf := newBridgeFlags(fs)
	var (
		from       = fs.String("from", "", "replication address of any node of the source database (its root, or a replica)")
		clusterKey = fs.String("cluster-key", "", "cluster key file of the source's replication listener (qs cert key), if it has one")
	)
	if err := parseOnlyFlags(fs, args); err != nil {
		return err
	}
	if *from == "" || *bf.to == "" {
		return errors.New("--from (the source's replication address) and --to (the bridged root's HTTP address) are required")
	}
	if len(splitList(*bf.to)) != 1 {
		return errors.New("--to takes one address: a bridged root is a single root")
	}
	token, err := readToken(*bf.tokenFile)
	if err != nil {
		return err
	}
	cfg := qsbridge.Config{Source: *from, Target: *bf.to, Database: *bf.db, Token: token, Timeout: *bf.timeout, Log: newLogger(*bf.logLevel), Metrics: bridgeMetrics}
	if *clusterKey != "" {
		k, err := clusterauth.LoadKey(*clusterKey)
		if err != nil {
			return err
		}
		cfg.Dial = clusterauth.New(clusterauth.Options{Key: k}).Dialer("")
	}
	b, err := qsbridge.New(cfg)
	if err != nil {
		return err
	}
	return bf.run(b.Run)
}
