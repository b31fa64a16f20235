package statuspage

import (
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

func TestHistoryKeepsTheLastPoints(t *testing.T) {
	h := NewHistory()
	if len(h.Points()) != 0 {
		t.Fatal("new history not empty")
	}
	for i := 1; i <= Points+7; i++ {
		h.Add(Point{T: int64(i), AppliedIndex: uint64(i)})
	}
	p := h.Points()
	if len(p) != Points || p[0].T != 8 || p[len(p)-1].T != Points+7 {
		t.Fatalf("%d points, first %d, last %d", len(p), p[0].T, p[len(p)-1].T)
	}
	for i := 1; i < len(p); i++ {
		if p[i].T != p[i-1].T+1 {
			t.Fatalf("out of order at %d: %d after %d", i, p[i].T, p[i-1].T)
		}
	}
}

func TestTiersOverTheLastMinute(t *testing.T) {
	pts := []Point{
		{T: 0, Counters: Counters{MemoryHits: 1000}}, // older than a minute before the last: not counted
		{T: 30_000, Counters: Counters{MemoryHits: 1100, MemoryMisses: 100, DiskHits: 10, DiskMisses: 10, FetchOK: 10}},
		{T: 80_000, Counters: Counters{MemoryHits: 1400, MemoryMisses: 200, DiskHits: 40, DiskMisses: 20, FetchOK: 19, FetchFailed: 1}},
	}
	tiers := Tiers(pts, true)
	if len(tiers) != 3 {
		t.Fatalf("tiers %+v", tiers)
	}
	want := []struct {
		name          string
		hits, lookups uint64
		rate          float64
	}{{"memory", 300, 400, 0.75}, {"disk", 30, 40, 0.75}, {"replicas", 9, 10, 0.9}}
	for i, w := range want {
		g := tiers[i]
		if g.Name != w.name || g.Hits != w.hits || g.Lookups != w.lookups || g.HitRate == nil || *g.HitRate != w.rate {
			t.Errorf("tier %d: %+v, want %+v", i, g, w)
		}
	}
	if tiers := Tiers(pts[2:], false); len(tiers) != 1 || tiers[0].HitRate != nil || tiers[0].Lookups != 0 {
		t.Errorf("one point, not a proxy: %+v", tiers)
	}
	if Tiers(nil, true) != nil {
		t.Error("tiers without points")
	}
}

func TestPageIsSelfContained(t *testing.T) {
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	body := w.Body.String()
	if w.Code != 200 || !strings.Contains(body, "/v1/node") {
		t.Fatalf("page: %d", w.Code)
	}
	for _, ext := range []string{"http://", "https://", "src=\"", "<link"} {
		if strings.Contains(body, ext) {
			t.Errorf("page refers to something outside itself: %q", ext)
		}
	}
}

// The page shows a lag below 0 (the node's last entry is dated in its
// future) as unknown, with the figure, never as 0. Its lag functions run
// under Node.js, without a browser.
func TestPageShowsNegativeLagAsUnknown(t *testing.T) {
	nodejs, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) not installed: the page's lag text is not checked")
	}
	src := string(page)
	start := strings.Index(src, "function lagText(s) {")
	end := strings.Index(src[start:], "\n}\n")
	cls := regexp.MustCompile(`(?m)^const lagClass = .*$`).FindString(src)
	if start < 0 || end < 0 || cls == "" {
		t.Fatal("lagText or lagClass not found in the page")
	}
	script := src[start:start+end+3] + cls + `
for (const s of [-3600, -0.25, 0, 0.5, 30]) console.log(JSON.stringify([s, lagText(s), lagClass(s)]));
`
	out, err := exec.Command(nodejs, "-e", script).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	want := []string{
		`[-3600,"unknown (dated 60.0 min ahead)","lag-bad"]`,
		`[-0.25,"unknown (dated 250 ms ahead)","lag-bad"]`,
		`[0,"0 ms","lag-ok"]`,
		`[0.5,"500 ms","lag-ok"]`,
		`[30,"30.0 s","lag-warn"]`,
	}
	if got := strings.TrimSpace(string(out)); got != strings.Join(want, "\n") {
		t.Fatalf("lag text:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
}
