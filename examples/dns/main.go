// Command dns is an example of qs serving DNS: records kept in a
// PostgreSQL table reach a qs root through qs bridge postgres, replicate to
// a leaf, and a small authoritative DNS server answers from the leaf.
//
//	dns serve   --leaf ADDR [--prefix dns/] [--listen 127.0.0.1:5353]
//	dns gen     --dsn DSN --records N
//	dns measure [--records N] [--updates N] [--rebuilds N]
//
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quicksilver-kv/qs/client"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dns serve|gen|measure [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = cmdServe(os.Args[2:])
	case "gen":
		err = cmdGen(os.Args[2:])
	case "measure":
		err = cmdMeasure(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (serve, gen, measure)", os.Args[1])
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "dns:", err)
		os.Exit(1)
	}
}

func cmdServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	leaf := fs.String("leaf", "127.0.0.1:7380", "HTTP address of the qs node to answer from")
	prefix := fs.String("prefix", "dns/", "key prefix of the records")
	listen := fs.String("listen", "127.0.0.1:5353", "UDP address to answer on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := client.New([]string{*leaf}, client.Options{Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	s, addr, err := startDNS(*listen, c, *prefix, log)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Printf("dns listening on %s\n", addr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}

func cmdGen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	dsn := fs.String("dsn", "", "PostgreSQL connection string")
	n := fs.Int("records", 1_000_000, "records to generate")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	start := time.Now()
	if err := generate(ctx, conn, *n); err != nil {
		return err
	}
	fmt.Printf("%d records in %s\n", *n, time.Since(start).Round(time.Millisecond))
	return nil
}

// generate creates the records table and fills it with n A records,
// h1.example.com. … hN.example.com.
func generate(ctx context.Context, conn *pgx.Conn, n int) error {
	if _, err := conn.Exec(ctx, schema); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, `INSERT INTO records
		SELECT 'h' || i || '.example.com.', 'A', 300, '10.' || (i >> 16 & 255) || '.' || (i >> 8 & 255) || '.' || (i & 255)
		FROM generate_series(1, $1::int) i
		ON CONFLICT (name) DO NOTHING`, n)
	return err
}
