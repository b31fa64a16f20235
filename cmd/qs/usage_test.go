package main

import (
	"strings"
	"testing"

	"github.com/quicksilver-kv/qs/internal/gateway"
)

func TestPrintUnread(t *testing.T) {
	var b strings.Builder
	err := printUnread(&b, gateway.UnreadReport{DB: "default", Index: 91234, Since: "2026-11-20T09:00:00Z", WindowSeconds: 168 * 3600, SampleRate: 64,
		Producers: []gateway.ProducerUnread{{Name: "dns", Keys: 12000, Unread: 310, Prefixes: []gateway.PrefixUnread{
			{Prefix: "dns/", Keys: 12000, Unread: 310, UnreadKeys: []string{"dns/old-zone-1", "dns/old-zone-2"}}}}},
		Unowned: &gateway.PrefixUnread{Keys: 4, Unread: 2, UnreadKeys: []string{"tmp/a", "tmp/b"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `database default at index 91234: keys with no sampled read since 2026-11-20T09:00:00Z (168h0m0s; one read in 64 sampled)
producer / prefix  keys   unread  first unread keys
dns                12000  310     
  "dns/"           12000  310     "dns/old-zone-1" "dns/old-zone-2" (+308)
(no producer)      4      2       "tmp/a" "tmp/b"
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestPrintUsage: every row has all six cells; the totals, which the
// store does not cost, say "-" where a figure is not known.
func TestPrintUsage(t *testing.T) {
	var b strings.Builder
	f := gateway.Figures{Counts: gateway.Counts{Keys: 1, KeyBytes: 5, ValueBytes: 5}, OverheadBytes: 22, StoredBytes: 32}
	err := printUsage(&b, gateway.UsageReport{DB: "default", Index: 2,
		Producers: []gateway.ProducerUsage{{Name: "dns", Figures: f, Prefixes: []gateway.PrefixUsage{{Prefix: "dns/", Figures: f}}}},
		Unowned:   &gateway.Counts{}, Total: gateway.Counts{Keys: 1, KeyBytes: 5, ValueBytes: 5}})
	if err != nil {
		t.Fatal(err)
	}
	want := `database default at index 2
producer / prefix  keys  key bytes  value bytes  overhead bytes  stored bytes
dns                1     5          5            22              32
  "dns/"           1     5          5            22              32
(no producer)      0     0          0            -               -
(database)         1     5          5            -               -
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestAnswerError(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{400, `{"error":{"code":"bad_request","message":"qs: ask the root at http://10.0.0.1:7380"}}` + "\n",
			"qs: bad_request (400): qs: ask the root at http://10.0.0.1:7380"},
		{502, "Bad Gateway\n", "qs: http_502 (502): Bad Gateway"}, // a proxy in between
		{500, `{"error":{}}`, `qs: http_500 (500): {"error":{}}`}, // no code: the body as it came
	} {
		if got := answerError(c.status, []byte(c.body)).Error(); got != c.want {
			t.Errorf("answerError(%d, %q) = %q, want %q", c.status, c.body, got, c.want)
		}
	}
}
