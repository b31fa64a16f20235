package bench

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// cdfPoint is one latency percentile: the latency in µs below which
// Percentile per cent of the requests completed (Percentile 100: max).
type cdfPoint struct {
	Micros     float64
	Percentile float64
}

// cdfSeries is the latency distribution of one target.
type cdfSeries struct {
	Target string
	Points []cdfPoint
}

// latencyPanel is what one CDF plot shows: one kind of request in one
// phase, a series per target that completed any (none: no plot).
type latencyPanel struct {
	Phase, Op string
	Series    []cdfSeries
}

// targetOrder lists the targets of a result's phases in the order they
// first appear, so that each target keeps its colour in every plot.
func targetOrder(r *Result) []string {
	var names []string
	for _, ph := range r.Phases {
		if !slices.Contains(names, ph.Target) {
			names = append(names, ph.Target)
		}
	}
	return names
}

// phaseNames lists the phases of a result in order.
func phaseNames(r *Result) []string {
	var names []string
	for _, ph := range r.Phases {
		if !slices.Contains(names, ph.Name) {
			names = append(names, ph.Name)
		}
	}
	return names
}

// opNames lists the kinds of request of a result in order.
func opNames(r *Result) []string {
	var names []string
	for _, ph := range r.Phases {
		for _, op := range ph.Ops {
			if !slices.Contains(names, op.Op) {
				names = append(names, op.Op)
			}
		}
	}
	return names
}

// latencyPanels returns a panel per phase and kind of request, from the
// percentiles of each target's histogram.
func latencyPanels(r *Result) []latencyPanel {
	var panels []latencyPanel
	for _, op := range opNames(r) {
		for _, name := range phaseNames(r) {
			pn := latencyPanel{Phase: name, Op: op}
			for _, ph := range r.Phases {
				if ph.Name != name {
					continue
				}
				s := ph.Op(op)
				if s == nil || s.Latency.Count == 0 {
					continue
				}
				l := s.Latency
				pn.Series = append(pn.Series, cdfSeries{Target: ph.Target, Points: []cdfPoint{
					{l.P50, 50}, {l.P90, 90}, {l.P99, 99}, {l.P999, 99.9}, {l.Max, 100},
				}})
			}
			panels = append(panels, pn)
		}
	}
	return panels
}

// nines maps a percentile to the CDF's vertical axis, where each step is
// a factor of ten fewer requests left slower: 90% at 1, 99% at 2, 99.9%
// at 3. The maximum, a single request, is drawn at 4.
func nines(pct float64) float64 {
	if pct >= 100 {
		return 4
	}
	return -math.Log10(1 - pct/100)
}

var ninesTicks = plot.ConstantTicks([]plot.Tick{
	{Value: nines(50), Label: "50%"}, {Value: nines(90), Label: "90%"},
	{Value: nines(99), Label: "99%"}, {Value: nines(99.9), Label: "99.9%"}, {Value: 4, Label: "max"},
})

// latencyTicks marks a log-scale latency axis given in µs: every 1, 2
// and 5 of each power of ten (labelled with its unit: 200µs, 5ms, 1s; the
// 2s and 5s only when the axis spans less than two powers of ten), and
// the other digits unlabelled.
type latencyTicks struct{}

func (latencyTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	dense := hi/lo < 100
	var ticks []plot.Tick
	for p := math.Pow(10, math.Floor(math.Log10(lo))); p <= hi; p *= 10 {
		for m := 1.0; m <= 9; m++ {
			v := m * p
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (dense && (m == 2 || m == 5)) {
				t.Label = latencyLabel(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// latencyLabel formats a tick of µs: 1µs, 200µs, 5ms, 1s.
func latencyLabel(us float64) string {
	switch {
	case us < 1e3:
		return fmt.Sprintf("%gµs", us)
	case us < 1e6:
		return fmt.Sprintf("%gms", math.Round(us)/1e3)
	default:
		return fmt.Sprintf("%gs", math.Round(us/1e3)/1e3)
	}
}

// rateTicks are gonum's default ticks, labelled without decimals when
// they are whole numbers (7500, not 7500.00).
type rateTicks struct{}

func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" && t.Value == math.Trunc(t.Value) {
			ticks[i].Label = fmt.Sprintf("%.0f", t.Value)
		}
	}
	return ticks
}

// Size of one plot of the grid.
const (
	svgPanelWidth  = 4.2 * vg.Inch
	svgPanelHeight = 3.4 * vg.Inch
)

// ResultSVG draws a scenario's results as one self-contained SVG: for
// each kind of request a row with, per phase, the latency distribution of
// every target (latency on a log scale against the percentile), and at
// the end of the row the throughput of every target in every phase, with
// its ratio to the baseline under the phase's name. A phase without
// requests of a kind (readlat's writes with 0 writers) leaves its tile
// blank.
func ResultSVG(r *Result) ([]byte, error) {
	ops := opNames(r)
	phases := phaseNames(r)
	if len(ops) == 0 || len(phases) == 0 {
		return nil, fmt.Errorf("scenario %s: no successful requests to plot", r.Scenario)
	}
	targets := targetOrder(r)
	colorOf := func(target string) int { return slices.Index(targets, target) }

	panels := latencyPanels(r)
	grid := make([][]*plot.Plot, len(ops))
	for i, op := range ops {
		grid[i] = make([]*plot.Plot, len(phases)+1)
		for j := range phases {
			p, err := latencyPlot(r.Scenario, panels[i*len(phases)+j], colorOf)
			if err != nil {
				return nil, err
			}
			grid[i][j] = p
		}
		p, err := throughputPlot(r, op, phases, targets)
		if err != nil {
			return nil, err
		}
		grid[i][len(phases)] = p
	}

	w := svgPanelWidth * vg.Length(len(phases)+1)
	h := svgPanelHeight * vg.Length(len(ops))
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	dc.SetColor(color.White) // opaque, for dark viewers
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: len(ops), Cols: len(phases) + 1, PadX: vg.Inch / 8, PadY: vg.Inch / 8,
		PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func latencyPlot(scenario string, pn latencyPanel, colorOf func(string) int) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %s: %s latency", scenario, pn.Phase, pn.Op)
	p.X.Label.Text = "latency (log scale)"
	p.Y.Label.Text = "requests completed within"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = latencyTicks{}
	p.Y.Tick.Marker = ninesTicks
	p.Y.Min, p.Y.Max = 0, 4.2
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	if len(pn.Series) == 0 {
		return nil, nil // nothing of this kind in this phase: a blank tile
	}
	for _, s := range pn.Series {
		xys := make(plotter.XYs, len(s.Points))
		for i, pt := range s.Points {
			xys[i] = plotter.XY{X: max(pt.Micros, 1), Y: nines(pt.Percentile)}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("%s %s %s: %w", pn.Phase, pn.Op, s.Target, err)
		}
		c := plotutil.Color(colorOf(s.Target))
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(s.Target, line, points)
	}
	return p, nil
}

func throughputPlot(r *Result, op string, phases, targets []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s throughput", r.Scenario, op)
	p.Y.Label.Text = op + " requests/s"
	p.Y.Tick.Marker = rateTicks{}
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	width := vg.Points(min(24, 90/float64(len(targets))))
	top := 0.0
	for i, target := range targets {
		vals := make(plotter.Values, len(phases))
		for j, name := range phases {
			for _, ph := range r.Phases {
				if ph.Name == name && ph.Target == target {
					if s := ph.Op(op); s != nil {
						vals[j] = s.OpsPerSec
						top = max(top, s.OpsPerSec)
					}
				}
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, fmt.Errorf("%s throughput of %s: %w", op, target, err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(i)-float64(len(targets)-1)/2)
		p.Add(bars)
		p.Legend.Add(target, bars)
	}
	p.Y.Max = 1.3 * top // room for the legend above the bars
	labels := make([]string, len(phases))
	base := ""
	for j, name := range phases {
		lines := []string{name}
		for _, ra := range r.Ratios {
			if ra.Phase == name && ra.Op == op && ra.Throughput > 0 {
				lines = append(lines, fmt.Sprintf("%s ×%.2f", ra.Target, ra.Throughput))
				base = ra.Baseline
			}
		}
		labels[j] = strings.Join(lines, "\n")
	}
	p.NominalX(labels...)
	if base != "" {
		p.Title.Text += fmt.Sprintf(" (× %s's)", base)
	}
	return p, nil
}

// SVGFileName is the name of a scenario's SVG in the --svg directory.
func SVGFileName(scenario string) string { return scenario + ".svg" }

// WriteSVGFiles writes ResultSVG of every scenario with results into dir
// (created if needed) and returns the paths written. A scenario without a
// successful request has nothing to plot and is skipped.
func (rep *Report) WriteSVGFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for i := range rep.Results {
		res := &rep.Results[i]
		if len(opNames(res)) == 0 {
			continue
		}
		b, err := ResultSVG(res)
		if err != nil {
			return paths, fmt.Errorf("plot %s: %w", res.Scenario, err)
		}
		path := filepath.Join(dir, SVGFileName(res.Scenario))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}
