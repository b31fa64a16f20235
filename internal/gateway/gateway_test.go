package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Tokens of the tests and their hashes.
var (
	tokA, hashA = NewToken()
	tokB, hashB = NewToken()
)

// writeFile writes a producers file atomically (rename), as an operator's
// tooling should.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func openGateway(t testing.TB, content string) (*Gateway, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "producers.toml")
	writeFile(t, path, content)
	g, err := Open(Options{Path: path, Databases: []string{"default", "other"}, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return g, path
}

func ops(keys ...string) []wal.Op {
	out := make([]wal.Op, len(keys))
	for i, k := range keys {
		out[i] = wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte("v")}
	}
	return out
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	g, _ := openGateway(t, fmt.Sprintf(`
[[producer]]
name = "a"
tokens = [%q]
prefixes = ["a/"]
`, hashA))
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic " + tokA, tokA, "Bearer  "} {
		if _, err := g.Authenticate(h); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Authenticate(%q) = %v, want ErrUnauthenticated", h, err)
		}
	}
	for _, h := range []string{"Bearer " + tokB, "Bearer " + tokA + "x", "Bearer " + hashA} {
		if _, err := g.Authenticate(h); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Authenticate(%q) = %v, want ErrInvalidToken", h, err)
		}
	}
	for _, h := range []string{"Bearer " + tokA, "bearer " + tokA, "BEARER  " + tokA + " "} {
		p, err := g.Authenticate(h)
		if err != nil || p.Name() != "a" {
			t.Errorf("Authenticate(%q) = %v, %v; want producer a", h, p, err)
		}
	}
	if n := testutil.ToFloat64(g.m.rejectedUnauthenticated); n != 6 {
		t.Errorf("unauthenticated rejections counted %v, want 6", n)
	}
	if n := testutil.ToFloat64(g.m.rejectedInvalidToken); n != 3 {
		t.Errorf("invalid_token rejections counted %v, want 3", n)
	}
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	g, _ := openGateway(t, fmt.Sprintf(`
[[producer]]
name = "auth-a"
tokens = [%q]
prefixes = ["a/", "shared/a"]
databases = ["default"]

[[producer]]
name = "auth-root"
tokens = [%q]
prefixes = [""]
`, hashA, hashB))
	a, _ := g.Authenticate("Bearer " + tokA)
	root, _ := g.Authenticate("Bearer " + tokB)
	if err := a.Authorize("default", ops("a/1", "shared/a", "shared/ab/c")); err != nil {
		t.Errorf("allowed batch refused: %v", err)
	}
	err := a.Authorize("default", ops("a/1", "b/2", "a/3"))
	var fe *ForbiddenError
	if !errors.As(err, &fe) || !errors.Is(err, ErrForbidden) || fe.Op != 1 || string(fe.Key) != "b/2" || len(fe.Prefixes) != 2 {
		t.Fatalf("batch with a forbidden op: %v (%+v)", err, fe)
	}
	if !strings.Contains(err.Error(), `"b/2"`) || !strings.Contains(err.Error(), `"a/"`) {
		t.Errorf("message names neither the key nor the prefixes: %v", err)
	}
	for _, k := range []string{"a", "A/1", "shared/", "xa/1"} {
		if err := a.Authorize("default", ops(k)); !errors.Is(err, ErrForbidden) {
			t.Errorf("key %q: %v, want forbidden", k, err)
		}
	}
	err = a.Authorize("other", ops("a/1"))
	if !errors.As(err, &fe) || fe.Prefixes != nil || !strings.Contains(err.Error(), `database "other"`) {
		t.Errorf("write to a database not listed: %v", err)
	}
	if n := testutil.ToFloat64(g.m.rejections.WithLabelValues("auth-a", reasonForbidden)); n != 6 {
		t.Errorf("forbidden rejections counted %v, want 6", n)
	}
	if err := root.Authorize("other", ops("anything", "\xff")); err != nil {
		t.Errorf(`prefix "" refused: %v`, err)
	}
}

func TestQuotaSlowsThenRefuses(t *testing.T) {
	// 2 ops/s (one per 500ms), bucket of 2, max_wait 600ms.
	g, _ := openGateway(t, fmt.Sprintf(`
max_wait = "600ms"
[[producer]]
name = "quota-ops"
tokens = [%q]
prefixes = [""]
ops_per_second = 2
ops_burst = 2
`, hashA))
	p, _ := g.Authenticate("Bearer " + tokA)
	ctx := context.Background()
	for i := range 2 {
		if err := p.Admit(ctx, 1, 10); err != nil {
			t.Fatalf("op %d within the burst: %v", i, err)
		}
	}
	if histCount(t, g, "quota-ops") != 0 {
		t.Fatal("writes within the burst were throttled")
	}
	// Bucket empty: one op is admitted after ~500ms.
	start := time.Now()
	if err := p.Admit(ctx, 1, 10); err != nil {
		t.Fatalf("op beyond the burst, admissible within max_wait: %v", err)
	}
	if el := time.Since(start); el < 400*time.Millisecond {
		t.Errorf("op beyond the burst was not slowed (%v)", el)
	}
	if n := histCount(t, g, "quota-ops"); n != 1 {
		t.Errorf("throttle histogram count %d, want 1", n)
	}
	// Two ops need ~1s of refill > max_wait: refused at once, to retry in
	// ~400ms.
	// With a context already done: a refusal that waited would end with
	// the context's error instead.
	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	err := p.Admit(done, 2, 10)
	var qe *QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, ErrQuota) || qe.Quota != "ops" || qe.RetryAfter <= 0 || qe.RetryAfter > 400*time.Millisecond {
		t.Fatalf("over quota: %v (%+v)", err, qe)
	}
	if n := testutil.ToFloat64(g.m.rejections.WithLabelValues("quota-ops", reasonQuotaOps)); n != 1 {
		t.Errorf("quota_ops rejections counted %v, want 1", n)
	}
	if RetryAfterSeconds(qe.RetryAfter) != 1 {
		t.Errorf("Retry-After %d for %v", RetryAfterSeconds(qe.RetryAfter), qe.RetryAfter)
	}
	// The refused write charged nothing: after RetryAfter the same write is
	// admitted, slowed at most max_wait.
	time.Sleep(qe.RetryAfter)
	if err := p.Admit(ctx, 2, 10); err != nil {
		t.Errorf("retry after RetryAfter: %v", err)
	}
	// Larger than the bucket: never admissible.
	err = p.Admit(ctx, 3, 10)
	if !errors.Is(err, ErrOverBurst) || !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("batch over ops_burst: %v", err)
	}
}

func TestQuotaBytesAndContext(t *testing.T) {
	g, _ := openGateway(t, fmt.Sprintf(`
max_wait = "10s"
[[producer]]
name = "quota-bytes"
tokens = [%q]
prefixes = [""]
bytes_per_second = 1000
`, hashA))
	p, _ := g.Authenticate("Bearer " + tokA)
	if err := p.Admit(context.Background(), 1, 1000); err != nil {
		t.Fatal(err)
	}
	if err := p.Admit(context.Background(), 1, 1001); !errors.Is(err, ErrOverBurst) {
		t.Errorf("write over the default bytes_burst (one second's worth): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Admit(ctx, 1, 1000); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait ended by the context: %v", err)
	}
	// Unlimited ops: any count passes.
	g2, _ := openGateway(t, fmt.Sprintf("max_wait = \"0s\"\n[[producer]]\nname = \"quota-bytes-2\"\ntokens = [%q]\nprefixes = [\"\"]\nbytes_per_second = 100\n", hashB))
	p2, _ := g2.Authenticate("Bearer " + tokB)
	if err := p2.Admit(context.Background(), 10000, 100); err != nil {
		t.Fatal(err)
	}
	var qe *QuotaError
	if err := p2.Admit(context.Background(), 1, 1); !errors.As(err, &qe) || qe.Quota != "bytes" {
		t.Errorf("max_wait 0s must refuse at once on an empty bucket: %v", err)
	}
}

func histCount(t *testing.T, g *Gateway, producer string) uint64 {
	t.Helper()
	m := &dto.Metric{}
	if err := g.m.throttle.WithLabelValues(producer).(prometheus.Metric).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func TestReload(t *testing.T) {
	file := func(hash string, prefix string, extra string) string {
		return fmt.Sprintf("max_wait = \"0s\"\n[[producer]]\nname = \"reload\"\ntokens = [%q]\nprefixes = [%q]\n%s", hash, prefix, extra)
	}
	g, path := openGateway(t, file(hashA, "a/", "ops_per_second = 0.1\nops_burst = 1\n"))
	p, err := g.Authenticate("Bearer " + tokA)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Admit(context.Background(), 1, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Rotate: B replaces A, and the prefix changes.
	writeFile(t, path, file(hashB, "b/", "ops_per_second = 0.1\nops_burst = 1\n"))
	waitFor(t, func() bool { _, err := g.Authenticate("Bearer " + tokB); return err == nil })
	if _, err := g.Authenticate("Bearer " + tokA); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("removed token still accepted: %v", err)
	}
	pb, _ := g.Authenticate("Bearer " + tokB)
	if err := pb.Authorize("default", ops("b/1")); err != nil {
		t.Errorf("new prefix refused: %v", err)
	}
	if err := pb.Authorize("default", ops("a/1")); !errors.Is(err, ErrForbidden) {
		t.Errorf("old prefix still allowed: %v", err)
	}
	// The bucket survived the reload: still empty.
	if err := pb.Admit(context.Background(), 1, 1); !errors.Is(err, ErrQuota) {
		t.Errorf("reload refilled the bucket: %v", err)
	}

	// An invalid file keeps the producers in force.
	writeFile(t, path, "[[producer]]\nname = \"reload\"\ntokens = [\"sha256:nothex\"]\n")
	waitFor(t, func() bool { return testutil.ToFloat64(g.m.reloadsFailed) > 0 })
	if _, err := g.Authenticate("Bearer " + tokB); err != nil {
		t.Errorf("invalid file dropped the producers in force: %v", err)
	}
	if changed, err := g.Reload(); changed || err == nil {
		t.Errorf("Reload of an invalid file = %v, %v", changed, err)
	}
	time.Sleep(50 * time.Millisecond) // five polls
	if n := testutil.ToFloat64(g.m.reloadsFailed); n != 1 {
		t.Errorf("a file that stays invalid was counted %v times, want once", n)
	}

	// Quota raised by a reload applies to the same bucket; an empty file
	// refuses everyone.
	writeFile(t, path, file(hashB, "b/", ""))
	waitFor(t, func() bool {
		p, err := g.Authenticate("Bearer " + tokB)
		return err == nil && p.Admit(context.Background(), 100, 1) == nil
	})
	writeFile(t, path, "")
	waitFor(t, func() bool { _, err := g.Authenticate("Bearer " + tokB); return errors.Is(err, ErrInvalidToken) })
	if changed, err := g.Reload(); changed || err != nil {
		t.Errorf("Reload of an unchanged file = %v, %v", changed, err)
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 60s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFileValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, file, want string
	}{
		{"unknown key", "[[producer]]\nname = \"x\"\ntoken = \"a\"\n", "unknown keys"},
		{"bad name", fmt.Sprintf("[[producer]]\nname = \"a b\"\ntokens = [%q]\nprefixes = [\"\"]\n", hashA), "name must match"},
		{"no tokens", "[[producer]]\nname = \"x\"\nprefixes = [\"\"]\n", "no tokens"},
		{"raw token", fmt.Sprintf("[[producer]]\nname = \"x\"\ntokens = [%q]\nprefixes = [\"\"]\n", tokA), "64 lowercase hex"},
		{"upper hex", fmt.Sprintf("[[producer]]\nname = \"x\"\ntokens = [%q]\nprefixes = [\"\"]\n", strings.ToUpper(hashA[7:])), "64 lowercase hex"},
		{"no prefixes", fmt.Sprintf("[[producer]]\nname = \"x\"\ntokens = [%q]\n", hashA), "no prefixes"},
		{"duplicate name", fmt.Sprintf("[[producer]]\nname = \"x\"\ntokens = [%q]\nprefixes = [\"\"]\n[[producer]]\nname = \"x\"\ntokens = [%q]\nprefixes = [\"\"]\n", hashA, hashB), "duplicate name"},
		{"shared token", fmt.Sprintf("[[producer]]\nname = \"x\"\ntokens = [%q]\nprefixes = [\"\"]\n[[producer]]\nname = \"y\"\ntokens = [%q]\nprefixes = [\"\"]\n", hashA, hashA), "also a token of"},
		{"unknown db", fmt.Sprintf("[[producer]]\nname = \"x\"\ntokens = [%q]\nprefixes = [\"\"]\ndatabases = [\"nope\"]\n", hashA), "not served"},
		{"negative rate", fmt.Sprintf("[[producer]]\nname = \"x\"\ntokens = [%q]\nprefixes = [\"\"]\nops_per_second = -1\n", hashA), "ops_per_second"},
		{"negative wait", "max_wait = \"-1s\"\n", "max_wait"},
		{"bad duration", "max_wait = \"soon\"\n", "soon"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseFile([]byte(c.file), "test")
			if err == nil {
				err = f.Validate([]string{"default"})
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	f, err := ParseFile([]byte(fmt.Sprintf("[[producer]]\nname = \"x\"\ntokens = [%q]\nprefixes = [\"\"]\nops_per_second = 2.5\nbytes_per_second = 100\n", hashA)), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(nil); err != nil {
		t.Fatal(err)
	}
	if p := f.Producers[0]; *f.MaxWait != DefaultMaxWait || p.OpsBurst != 3 || p.BytesBurst != 100 {
		t.Errorf("defaults: max_wait %v, ops_burst %d, bytes_burst %d", *f.MaxWait, p.OpsBurst, p.BytesBurst)
	}
	if _, err := Open(Options{Path: filepath.Join(t.TempDir(), "missing.toml")}); err == nil {
		t.Error("Open of a missing file succeeded")
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	tok, hash := NewToken()
	if !strings.HasPrefix(tok, "qs_") || len(tok) != 3+43 {
		t.Errorf("token %q", tok)
	}
	if _, err := parseTokenHash(hash); err != nil || hash != HashToken(tok) {
		t.Errorf("hash %q of %q: %v", hash, tok, err)
	}
	// SHA-256("abc"), FIPS 180-2 test vector.
	if got := HashToken("abc"); got != "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("HashToken(abc) = %s", got)
	}
	if t2, _ := NewToken(); t2 == tok {
		t.Error("two tokens are equal")
	}
}

// TestConcurrentReload: writes checked while the file is reloaded over and
// over always see one whole load (run with -race).
func TestConcurrentReload(t *testing.T) {
	content := func(prefix string) string {
		return fmt.Sprintf("[[producer]]\nname = \"conc\"\ntokens = [%q]\nprefixes = [%q]\nops_per_second = 1e6\n", hashA, prefix)
	}
	g, path := openGateway(t, content("x/"))
	done := make(chan error, 4)
	for range 4 {
		go func() {
			for range 500 {
				p, err := g.Authenticate("Bearer " + tokA)
				if err != nil {
					done <- err
					return
				}
				// Exactly one of the two keys is allowed by any one load.
				ex, ey := p.Authorize("default", ops("x/1")), p.Authorize("default", ops("y/1"))
				if (ex == nil) == (ey == nil) {
					done <- fmt.Errorf("one load allows x/1: %v, y/1: %v", ex, ey)
					return
				}
				if err := p.Admit(context.Background(), 1, 3); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for i := range 20 {
		writeFile(t, path, content([]string{"x/", "y/"}[i%2]))
		if _, err := g.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
