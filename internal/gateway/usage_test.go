package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(store.Options{Dir: t.TempDir(), ChunkBytes: 4096, MinFreeBytes: 1, BallastBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func fig(keys, kb, vb, overhead int64) Figures {
	return Figures{Counts: Counts{Keys: keys, KeyBytes: kb, ValueBytes: vb}, OverheadBytes: overhead, StoredBytes: kb + vb + overhead}
}

// TestUsageExact checks every figure of a usage report on a known dataset
// against the per-key formula of docs/storage.md: 22 bytes for an inline
// value; for a chunked one 22 + uvarint(length) + uvarint(chunks) + 4 +
// chunks × (1 + uvarint(len key) + len key + 4 + 8 + 4).
func TestUsageExact(t *testing.T) {
	st := openStore(t)
	set := func(k string, n int) wal.Op {
		return wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(strings.Repeat("v", n))}
	}
	if _, err := st.Write(context.Background(), store.Batch{Ops: []wal.Op{
		set("dns/a", 4), set("dns/zones/b", 10), set("web/c", 100), set("misc/d", 7),
		set("web/big", 10000), // 3 chunks of ≤ 4096
		set("gone/e", 5),
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpDelete, Key: []byte("gone/e")}}}); err != nil {
		t.Fatal(err)
	}
	g, _ := openGateway(t, fmt.Sprintf(`
[[producer]]
name = "web"
tokens = [%q]
prefixes = ["web/", "dns/zones/"]

[[producer]]
name = "dns"
tokens = [%q]
prefixes = ["dns/zones/", "dns/", "dns/"]
databases = ["default"]

[[producer]]
name = "elsewhere"
tokens = ["sha256:%064x"]
prefixes = [""]
databases = ["other"]
`, hashA, hashB, 1))

	r, err := g.Usage(st, "default", "")
	if err != nil {
		t.Fatal(err)
	}
	chunked := int64(22 + 2 + 1 + 4 + 3*(1+1+7+4+8+4))
	want := UsageReport{
		DB: "default", Index: 2,
		Total: Counts{Keys: 5, KeyBytes: 5 + 11 + 5 + 6 + 7, ValueBytes: 4 + 10 + 100 + 7 + 10000},
		Producers: []ProducerUsage{
			{Name: "dns", Figures: fig(2, 16, 14, 44), Prefixes: []PrefixUsage{
				{Prefix: "dns/", Figures: fig(2, 16, 14, 44)},
				{Prefix: "dns/zones/", Figures: fig(1, 11, 10, 22)},
			}},
			{Name: "web", Figures: fig(3, 23, 10110, 22+chunked+22), Prefixes: []PrefixUsage{
				{Prefix: "dns/zones/", Figures: fig(1, 11, 10, 22)},
				{Prefix: "web/", Figures: fig(2, 12, 10100, 22+chunked)},
			}},
		},
		Unowned: &Counts{Keys: 1, KeyBytes: 6, ValueBytes: 7},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("usage report\n got %+v\nwant %+v", r, want)
	}

	one, err := g.Usage(st, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Producers) != 1 || !reflect.DeepEqual(one.Producers[0], want.Producers[1]) || one.Unowned != nil {
		t.Errorf("usage of web alone: %+v", one)
	}
	if _, err := g.Usage(st, "default", "elsewhere"); !errors.Is(err, ErrUnknownProducer) {
		t.Errorf("producer of another database: %v", err)
	}
	var none *Gateway
	r, err = none.Usage(st, "default", "")
	if err != nil || len(r.Producers) != 0 || *r.Unowned != r.Total {
		t.Errorf("usage without producers: %+v, %v", r, err)
	}
}

func TestCoverOf(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"b/", "a/", "a/x", "a/"}, []string{"a/", "b/"}},
		{[]string{"a/x/", "a/", "ab", "a"}, []string{"a"}},
		{[]string{"x", ""}, []string{""}},
		{[]string{"a/b", "a/c", "a/bb"}, []string{"a/b", "a/c"}},
	} {
		if got := coverOf(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("coverOf(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
