package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// svgResult is a readlat-like result: two phases, two kinds of request,
// a target whose name needs escaping and a baseline.
func svgResult() *Result {
	op := func(name string, ops float64, p50 float64) OpStats {
		return OpStats{Op: name, Ops: 1000, OpsPerSec: ops, Latency: Latency{
			Count: 1000, P50: p50, P90: 2 * p50, P99: 5 * p50, P999: 20 * p50, Max: 100 * p50}}
	}
	var phases []Phase
	for _, name := range []string{"0 writers", "1 writers"} {
		phases = append(phases,
			Phase{Name: name, Target: `q<s> & "co"`, Ops: []OpStats{op("read", 9000, 40), op("write", 300, 900)}},
			Phase{Name: name, Target: "memcached", Baseline: true, Ops: []OpStats{op("read", 10000, 30), op("write", 3000, 60)}})
	}
	return &Result{Scenario: "readlat", Phases: phases, Ratios: computeRatios(phases)}
}

// svgTexts parses b as XML and returns the text of every element.
func svgTexts(t *testing.T, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(v)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return texts
}

func count(texts []string, s string) int {
	n := 0
	for _, x := range texts {
		if x == s {
			n++
		}
	}
	return n
}

func TestLatencyPanelsOneSeriesPerTarget(t *testing.T) {
	res := svgResult()
	panels := latencyPanels(res)
	if len(panels) != 4 { // 2 ops × 2 phases
		t.Fatalf("%d panels, want 4: %+v", len(panels), panels)
	}
	for _, pn := range panels {
		if len(pn.Series) != 2 || pn.Series[0].Target != `q<s> & "co"` || pn.Series[1].Target != "memcached" {
			t.Errorf("%s %s: series %+v", pn.Phase, pn.Op, pn.Series)
		}
		for _, s := range pn.Series {
			for i := 1; i < len(s.Points); i++ {
				if s.Points[i].Percentile <= s.Points[i-1].Percentile || s.Points[i].Micros < s.Points[i-1].Micros {
					t.Errorf("%s %s %s: points out of order: %+v", pn.Phase, pn.Op, s.Target, s.Points)
				}
			}
		}
	}
	// A target without requests of a kind in a phase has no series there.
	res.Phases[0].Ops = res.Phases[0].Ops[:1]
	if pn := latencyPanels(res)[2]; pn.Op != "write" || len(pn.Series) != 1 || pn.Series[0].Target != "memcached" {
		t.Errorf("write panel without the first target's writes: %+v", pn)
	}
}

func TestResultSVG(t *testing.T) {
	b, err := ResultSVG(svgResult())
	if err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, b)
	// Each target is named in the legend of 4 CDF plots and 2 bar plots.
	for _, name := range []string{`q<s> & "co"`, "memcached"} {
		if n := count(texts, name); n != 6 {
			t.Errorf("%q named %d times, want 6", name, n)
		}
	}
	for _, label := range []string{"latency (log scale)", "requests completed within", "read requests/s", "write requests/s",
		"readlat, 0 writers: read latency", "12000", "3000", "readlat, 1 writers: write latency", "99.9%", "max", "100µs", "1ms",
		`q<s> & "co" ×0.90`, `q<s> & "co" ×0.10`, "readlat: read throughput (× memcached's)"} {
		if count(texts, label) == 0 {
			t.Errorf("no text %q in %q", label, texts)
		}
	}
	if bytes.Contains(b, []byte(`q<s>`)) {
		t.Error("target name written unescaped")
	}
	for _, ref := range []string{"href=", "url(", "@import"} {
		if bytes.Contains(b, []byte(ref)) {
			t.Errorf("SVG refers to an external resource (%s)", ref)
		}
	}
}

// TestResultSVGBlankTile: a phase without requests of a kind has no CDF,
// and the targets are named in the others only.
func TestResultSVGBlankTile(t *testing.T) {
	res := svgResult()
	for i := range 2 {
		res.Phases[i].Ops = res.Phases[i].Ops[:1] // no writes with 0 writers
	}
	b, err := ResultSVG(res)
	if err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, b)
	if n := count(texts, "memcached"); n != 5 {
		t.Errorf("memcached named %d times, want 5", n)
	}
	if count(texts, "readlat, 0 writers: write latency") != 0 {
		t.Error("a CDF of a phase without writes")
	}
}

func TestLatencyTicks(t *testing.T) {
	label := func(lo, hi float64) string {
		var l []string
		for _, tk := range (latencyTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				l = append(l, tk.Label)
			}
		}
		return strings.Join(l, " ")
	}
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{30, 2000, "50µs 100µs 200µs 500µs 1ms 2ms"},
		{30, 4000, "100µs 1ms"},
		{1500, 120000, "2ms 5ms 10ms 20ms 50ms 100ms"},
		{0.5, 2e6, "1µs 10µs 100µs 1ms 10ms 100ms 1s"},
		{0, 10, ""},
	} {
		if got := label(c.lo, c.hi); got != c.want {
			t.Errorf("ticks %g–%g: %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}

func TestRateTicks(t *testing.T) {
	var labels []string
	for _, tk := range (rateTicks{}).Ticks(0, 7800) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, " "); got != "0 2500 5000 7500" {
		t.Errorf("labels %q", got)
	}
}

func TestResultSVGNothingToPlot(t *testing.T) {
	res := &Result{Scenario: "write", Phases: []Phase{{Name: "batch 1", Target: "qs", Errors: 3}}}
	if _, err := ResultSVG(res); err == nil || !strings.Contains(err.Error(), "no successful requests") {
		t.Errorf("err %v", err)
	}
	dir := t.TempDir()
	paths, err := (&Report{Results: []Result{*res}}).WriteSVGFiles(dir)
	if err != nil || len(paths) != 0 {
		t.Errorf("paths %v, err %v", paths, err)
	}
}

func TestWriteSVGFilesBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := &Report{Results: []Result{*svgResult()}}
	if _, err := rep.WriteSVGFiles(filepath.Join(file, "svg")); err == nil {
		t.Error("no error for a directory under a file")
	}
}

// TestRunWritesSVGFiles runs two scenarios against fake servers and writes
// their plots.
func TestRunWritesSVGFiles(t *testing.T) {
	a := newFakeTarget(t, "a", true)
	b := newFakeTarget(t, "b", false)
	cfg := testConfig()
	cfg.Duration = 300 * time.Millisecond
	cfg.Scenarios = []string{"write", "readlat"}
	cfg.Targets = []Target{*a.t, *b.t}
	cfg.Baseline = "b"
	rep, err := Run(context.Background(), cfg, "qs bench", testLogf(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "plots")
	paths, err := rep.WriteSVGFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "write.svg"), filepath.Join(dir, "readlat.svg")}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		texts := svgTexts(t, data)
		if count(texts, "a") == 0 {
			t.Errorf("%s: target a not named", p)
		}
		// write runs only against targets with an HTTP address.
		if hasB := count(texts, "b") > 0; hasB != (i == 1) {
			t.Errorf("%s: target b named: %v", p, hasB)
		}
	}
}
