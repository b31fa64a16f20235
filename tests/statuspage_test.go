package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quicksilver-kv/qs/client"
)

// findChromium returns the path of a Chromium or Chrome binary, or "".
func findChromium() string {
	if p := os.Getenv("QS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium for the test and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := findChromium()
	if path == "" {
		t.Skip("no chromium found (apt-get install chromium, or set QS_CHROMIUM): the status page is tested in a real browser")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1400),
		chromedp.Flag("no-proxy-server", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// pageRow is one node of the tree as the page draws it.
type pageRow struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	Depth int    `json:"depth"`
	Index string `json:"index"`
	Lag   string `json:"lag"`
}

// treeRowsJS reads the tree table of database default from the page.
const treeRowsJS = `[...document.querySelectorAll('section.db[data-db="default"] tr.tree-node')].map(r => ({
	name: r.dataset.name, role: r.querySelector('.role').textContent, depth: +r.querySelector('.depth').textContent,
	index: r.querySelector('.index').textContent, lag: r.querySelector('.lag').textContent}))`

func parseShownIndex(s string) uint64 {
	n, _ := strconv.ParseUint(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 10, 64)
	return n
}

// TestStatusPageShowsTheTree opens the root's status page in headless
// Chromium over a real tree (root → intermediate → leaf, and a proxy
// under the intermediate) and checks the rendered page: every node by
// name with its role, depth and applied index, learned through the
// replication reports; and a write at the root makes the indexes shown
// move without a reload.
func TestStatusPageShowsTheTree(t *testing.T) {
	ctx := browser(t)
	root := startQS(t, t.TempDir(), "--node-name", "sp-root")
	mid := startQS(t, t.TempDir(), "--node-name", "sp-mid", "--upstream", root.Addr["repl"])
	leaf := startQS(t, t.TempDir(), "--node-name", "sp-leaf", "--upstream", mid.Addr["repl"])
	startQS(t, t.TempDir(), "--node-name", "sp-proxy", "--upstream", mid.Addr["repl"], "--role", "proxy", "--replicas", leaf.Addr["repl"])

	url := "http://" + root.Addr["http"] + "/"
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`section.db[data-db="default"]`))); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	// Mark the document: a reload would lose the mark.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.qsMark = "same page"; true`)); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		role  string
		depth int
	}{"sp-root": {"root", 0}, "sp-mid": {"replica", 1}, "sp-leaf": {"replica", 2}, "sp-proxy": {"proxy", 2}}
	rows := waitRows(t, ctx, "every node of the tree", func(rows []pageRow) bool {
		if len(rows) != len(want) {
			return false
		}
		for _, r := range rows {
			w, ok := want[r.Name]
			if !ok || r.Role != w.role || r.Depth != w.depth || r.Index == "" {
				return false
			}
		}
		return true
	})
	if rows[0].Name != "sp-root" {
		t.Errorf("first row %q, want the root", rows[0].Name)
	}
	if node, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#node-name"))); err != nil || node != "sp-root" {
		t.Errorf("page names node %q (%v), want sp-root", node, err)
	}

	// A write at the root shows on the page, at the root and down the tree.
	res, err := root.client(t).Put(context.Background(), "page/k", []byte("v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitRows(t, ctx, fmt.Sprintf("every node at index ≥ %d", res.Index), func(rows []pageRow) bool {
		for _, r := range rows {
			if parseShownIndex(r.Index) < res.Index {
				return false
			}
		}
		return len(rows) == len(want)
	})
	applied, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`section.db[data-db="default"] dd.applied`)))
	if err != nil {
		t.Fatal(err)
	}
	mark, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.qsMark || ""`))
	if err != nil {
		t.Fatal(err)
	}
	if parseShownIndex(applied) < res.Index {
		t.Errorf("applied index shown %q, want ≥ %d", applied, res.Index)
	}
	if mark != "same page" {
		t.Error("the page was reloaded; it should update itself in place")
	}
	if path := os.Getenv("QS_SCREENSHOT"); path != "" {
		time.Sleep(5 * time.Second) // a few points on the graphs
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitRows polls the page's tree until ok holds (60 s at most).
func waitRows(t *testing.T, ctx context.Context, what string, ok func([]pageRow) bool) []pageRow {
	t.Helper()
	var rows []pageRow
	for deadline := time.Now().Add(60 * time.Second); ; {
		var err error
		if rows, err = chromedp.Run(ctx, chromedp.Evaluate[[]pageRow](treeRowsJS)); err != nil {
			t.Fatalf("read the page: %v", err)
		}
		if ok(rows) {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("page did not show %s within 60s; it shows %+v", what, rows)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestStatusPageOfAWaitingReplica opens, in headless Chromium, the status
// page of a new replica whose source is not up: the page is served and
// shows the node by name and its database waiting.
func TestStatusPageOfAWaitingReplica(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	up1, up2, second := freeAddr(t), freeAddr(t), freeAddr(t)
	rep := startCmd(t, dir, exec.Command(qsBin, "serve", "--data", dir, "--node-name", "sp-waiting",
		"--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0", "--log-level", "warn",
		"--upstream", up1+","+up2, "--secondary", second), 1)
	url := "http://" + rep.Addr["http"] + "/"
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`section.db[data-db="default"]`))); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	source, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`section.db[data-db="default"] dd[data-fact="source"]`)))
	if want := "waiting for " + up1 + ", " + up2 + " or " + second; err != nil || source != want {
		t.Errorf("page shows source %q (%v), want %q", source, err, want)
	}
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`section.db[data-db="default"] dd[data-fact="state"]`)))
	if err != nil || state != "waiting" {
		t.Errorf("page shows state %q (%v), want waiting", state, err)
	}
	if node, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#node-name"))); err != nil || node != "sp-waiting" {
		t.Errorf("page names node %q (%v), want sp-waiting", node, err)
	}
	// The process's memory, in the header; the C allocator's trims only
	// from a build that trims it.
	var doc struct {
		Process struct {
			AllocatorTrims *struct{} `json:"allocator_trims"`
		} `json:"process"`
	}
	if err := getJSON("http://"+rep.Addr["http"]+"/v1/node", &doc); err != nil {
		t.Fatal(err)
	}
	mem, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#process")))
	if err != nil || !strings.Contains(mem, " resident · Go heap ") {
		t.Errorf("page shows the process's memory as %q (%v), want its resident memory and Go heap", mem, err)
	}
	if trims := strings.Contains(mem, "C allocator trimmed "); trims != (doc.Process.AllocatorTrims != nil) {
		t.Errorf("page shows %q, with allocator trims in /v1/node: %v", mem, doc.Process.AllocatorTrims != nil)
	}
	if path := os.Getenv("QS_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusPageShowsAFullProxyCache opens, in headless Chromium, the
// status page of a proxy given no budget for fetched values: once it
// has fetched one, its cache is shown full and not admitting.
func TestStatusPageShowsAFullProxyCache(t *testing.T) {
	ctx := browser(t)
	root := startQS(t, t.TempDir(), "--node-name", "sp-root")
	px := startQS(t, t.TempDir(), "--node-name", "sp-full", "--role", "proxy", "--upstream", root.Addr["repl"],
		"--replicas", root.Addr["repl"], "--cache-bytes", "-1", "--window", "1")
	res, err := root.client(t).Put(context.Background(), "page/a", []byte("value a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.client(t).Put(context.Background(), "page/b", []byte("value b"), nil); err != nil {
		t.Fatal(err)
	}
	c := px.client(t)
	v, err := c.Get(context.Background(), "page/a", client.ReadOptions{MinIndex: res.Index + 1})
	if err != nil || string(v.Value) != "value a" {
		t.Fatalf("read page/a through the proxy: %q, %v", v.Value, err)
	}

	url := "http://" + px.Addr["http"] + "/"
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`section.db[data-db="default"]`))); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	// The fact as "class|text", or "" while the page does not show it.
	const cacheFactJS = `(() => { const e = document.querySelector('section.db[data-db="default"] dd[data-fact="cache"]'); return e ? e.className + "|" + e.textContent : ""; })()`
	var shown string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the page showed the cache as %q (class|text)", shown)
		}
	})
	pollFor(t, "the page to show the cache full and not admitting, as a warning", func() bool {
		if shown, err = chromedp.Run(ctx, chromedp.Evaluate[string](cacheFactJS)); err != nil {
			t.Fatalf("read the cache fact: %v", err)
		}
		return strings.HasPrefix(shown, "lag-warn|") && strings.HasSuffix(shown, "(window only) · full, not admitting")
	})
}
