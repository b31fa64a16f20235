package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/miekg/dns"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/bridge/pgtest"
)

// cmdMeasure runs the whole pipeline on this machine (a throwaway
// PostgreSQL, a root, a leaf, the bridge, the DNS server) and measures:
// the initial copy, UPDATE COMMIT → value changed at the leaf, UPDATE
// COMMIT → DNS answer changed, and the same change made by a full rebuild
// (the whole table exported and written again).
func cmdMeasure(args []string) error {
	fs := flag.NewFlagSet("measure", flag.ContinueOnError)
	records := fs.Int("records", 1_000_000, "records in the zone")
	updates := fs.Int("updates", 500, "one-record updates to time (for the leaf, then again for DNS)")
	rebuilds := fs.Int("rebuilds", 3, "full rebuilds to time")
	qsBin := fs.String("qs", "", "qs binary (default: built from this module)")
	keep := fs.Bool("keep", false, "keep the temporary directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "qs-dns-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			p.Wait()
		}
	}()
	if *qsBin == "" {
		*qsBin = filepath.Join(dir, "qs")
		if out, err := exec.Command("go", "build", "-o", *qsBin, "github.com/quicksilver-kv/qs/cmd/qs").CombinedOutput(); err != nil {
			return fmt.Errorf("build qs: %v\n%s", err, out)
		}
	}
	ctx := context.Background()

	pgDir := filepath.Join(dir, "pg")
	os.Mkdir(pgDir, 0o700)
	pg, err := pgtest.Start(pgDir, "logical")
	if err != nil {
		return err
	}
	defer pg.Stop()
	dsn := pg.DSN("postgres", "postgres")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	t0 := time.Now()
	if err := generate(ctx, conn, *records); err != nil {
		return err
	}
	fmt.Printf("zone: %d records generated in PostgreSQL in %s\n", *records, time.Since(t0).Round(time.Millisecond))

	serve := func(name string, extra ...string) (map[string]string, error) {
		a := append([]string{"serve", "--data", filepath.Join(dir, name), "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0",
			"--repl", "127.0.0.1:0", "--log-level", "warn"}, extra...)
		cmd := exec.Command(*qsBin, a...)
		addrs, err := startProc(cmd, 3, os.Stderr)
		if err == nil {
			procs = append(procs, cmd)
		}
		return addrs, err
	}
	root, err := serve("root")
	if err != nil {
		return err
	}
	leaf, err := serve("leaf", "--upstream", root["repl"])
	if err != nil {
		return err
	}
	rootC, _ := client.New([]string{root["http"]}, client.Options{Timeout: 60 * time.Second})
	leafC, _ := client.New([]string{leaf["http"]}, client.Options{Timeout: 10 * time.Second})

	// The bridge: initial copy, then changes.
	copyDone := make(chan string, 1)
	bridge := exec.Command(*qsBin, "bridge", "postgres", "--dsn", dsn, "--table", "records", "--key-column", "name",
		"--prefix", "dns/", "--to", root["http"], "--metrics", "127.0.0.1:0", "--log-level", "warn")
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), ": done, ") {
				copyDone <- sc.Text()
			}
		}
	}()
	t0 = time.Now()
	if _, err := startProc(bridge, 1, pw); err != nil {
		return err
	}
	procs = append(procs, bridge)
	var line string
	select {
	case line = <-copyDone:
	case <-time.After(30 * time.Minute):
		return errors.New("the initial copy did not finish in 30 minutes")
	}
	copyTime := time.Since(t0)
	fmt.Printf("initial copy: %s (bridge start to copy done: %s, %.0f rows/s)\n", line, copyTime.Round(time.Millisecond), float64(*records)/copyTime.Seconds())
	last := fmt.Sprintf("dns/h%d.example.com.", *records)
	if err := waitFor(60*time.Second, func() bool { _, err := leafC.Get(ctx, last, client.ReadOptions{}); return err == nil }); err != nil {
		return fmt.Errorf("the leaf never held the copy: %w", err)
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	perRecord, perAddr, err := startDNS("127.0.0.1:0", leafC, "dns/", log)
	if err != nil {
		return err
	}
	defer perRecord.Close()
	full, fullAddr, err := startDNS("127.0.0.1:0", leafC, "full/", log)
	if err != nil {
		return err
	}
	defer full.Close()

	update := func(name string) (string, time.Time, error) {
		ip := fmt.Sprintf("192.0.%d.%d", rand.IntN(256), rand.IntN(256))
		start := time.Now()
		_, err := conn.Exec(ctx, "UPDATE records SET content = $1 WHERE name = $2", ip, name)
		return ip, start, err
	}
	randomName := func() string { return fmt.Sprintf("h%d.example.com.", 1+rand.IntN(*records)) }

	// UPDATE COMMIT → the new value readable at the leaf.
	var leafLat []time.Duration
	for range *updates {
		name := randomName()
		ip, start, err := update(name)
		if err != nil {
			return err
		}
		err = waitFor(30*time.Second, func() bool {
			v, err := leafC.Get(ctx, "dns/"+name, client.ReadOptions{})
			return err == nil && strings.Contains(string(v.Value), `"`+ip+`"`)
		})
		if err != nil {
			return fmt.Errorf("leaf never showed %s = %s: %w", name, ip, err)
		}
		leafLat = append(leafLat, time.Since(start))
	}
	fmt.Printf("UPDATE COMMIT → readable at the leaf (%d updates): %s\n", len(leafLat), percentiles(leafLat))

	// UPDATE COMMIT → the DNS answer changed.
	dc := &dns.Client{Timeout: 2 * time.Second}
	ask := func(addr, name string) string {
		q := new(dns.Msg)
		q.SetQuestion(name, dns.TypeA)
		r, _, err := dc.Exchange(q, addr)
		if err != nil || len(r.Answer) == 0 {
			return ""
		}
		if a, ok := r.Answer[0].(*dns.A); ok {
			return a.A.String()
		}
		return ""
	}
	var dnsLat []time.Duration
	for range *updates {
		name := randomName()
		ip, start, err := update(name)
		if err != nil {
			return err
		}
		if err := waitFor(30*time.Second, func() bool { return ask(perAddr, name) == ip }); err != nil {
			return fmt.Errorf("DNS never answered %s = %s: %w", name, ip, err)
		}
		dnsLat = append(dnsLat, time.Since(start))
	}
	fmt.Printf("UPDATE COMMIT → DNS answer changed, per-record updates (%d updates): %s\n", len(dnsLat), percentiles(dnsLat))

	// Full rebuilds: export the whole table and write it again, under
	// full/, in batches as large as the root takes (10,000 operations);
	// the first fills full/ and is not timed.
	var rebuildLat []time.Duration
	for i := 0; i <= *rebuilds; i++ {
		name := randomName()
		ip, start, err := update(name)
		if err != nil {
			return err
		}
		idx, err := rebuild(ctx, conn, rootC)
		if err != nil {
			return err
		}
		if err := waitFor(5*time.Minute, func() bool {
			_, err := leafC.Get(ctx, "full/"+name, client.ReadOptions{MinIndex: idx, Wait: time.Second})
			return err == nil && ask(fullAddr, name) == ip
		}); err != nil {
			return fmt.Errorf("full rebuild never showed %s = %s: %w", name, ip, err)
		}
		if i > 0 {
			rebuildLat = append(rebuildLat, time.Since(start))
		}
	}
	fmt.Printf("UPDATE COMMIT → DNS answer changed, full rebuild of %d records (%d rebuilds): %s\n", *records, len(rebuildLat), percentiles(rebuildLat))
	return nil
}

// rebuild writes every record again under full/ and returns the index of
// the last batch.
func rebuild(ctx context.Context, conn *pgx.Conn, c *client.Client) (uint64, error) {
	rows, err := conn.Query(ctx, "SELECT name, row_to_json(r)::text FROM records r")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var ops []client.Op
	var last uint64
	flush := func() error {
		res, err := c.Batch(ctx, ops, nil)
		if err != nil {
			return fmt.Errorf("rebuild batch: %w", err)
		}
		last = max(last, res.Index)
		ops = ops[:0]
		return nil
	}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return 0, err
		}
		ops = append(ops, client.Op{Key: "full/" + name, Value: []byte(value)})
		if len(ops) == 10000 {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ops) > 0 {
		if err := flush(); err != nil {
			return 0, err
		}
	}
	if last == 0 {
		st, err := c.Status(ctx)
		if err != nil {
			return 0, err
		}
		if f, ok := st["applied_index"].(float64); ok {
			last = uint64(f)
		}
	}
	return last, nil
}

func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "no samples"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	r := func(x time.Duration) string { return x.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s, p90 %s, p99 %s, max %s", r(at(0.50)), r(at(0.90)), r(at(0.99)), r(s[len(s)-1]))
}

// waitFor polls cond (every 200µs) until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

var announceRE = regexp.MustCompile(`^(\w+) listening on (\S+)`)

// startProc starts cmd in its own process group and waits for want
// "KIND listening on ADDR" lines on its stdout; stderr goes to errOut.
func startProc(cmd *exec.Cmd, want int, errOut io.Writer) (map[string]string, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addrs := map[string]string{}
	sc := bufio.NewScanner(out)
	for len(addrs) < want && sc.Scan() {
		if m := announceRE.FindStringSubmatch(sc.Text()); m != nil {
			addrs[m[1]] = m[2]
		}
	}
	go io.Copy(io.Discard, out)
	if len(addrs) < want {
		return nil, fmt.Errorf("%s exited before listening", cmd.Args[0])
	}
	return addrs, nil
}
