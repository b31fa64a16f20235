package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report as aligned tables for a terminal.
func (r *Report) WriteText(w io.Writer) error {
	return r.write(w, false)
}

// WriteMarkdown writes the report as markdown, ready for
// docs/benchmarks.md.
func (r *Report) WriteMarkdown(w io.Writer) error {
	return r.write(w, true)
}

func (r *Report) write(w io.Writer, md bool) error {
	table := textTable
	if md {
		table = markdownTable
	}
	ew := &errWriter{w: w}
	p := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }
	code := func(s string) string {
		if md {
			return "`" + s + "`"
		}
		return s
	}
	if md {
		p("## qs bench, %s\n\n", r.Started.Format("2006-01-02 15:04 MST"))
	} else {
		p("qs bench, %s\n", r.Started.Format("2006-01-02 15:04:05 MST"))
	}
	item := "  "
	if md {
		item = "- "
	}
	m := r.Machine
	p("%smachine: %d CPUs, %s, %s/%s, kernel %s, %s\n", item, m.CPUs, orDash(m.CPUModel), m.OS, m.Arch, orDash(m.Kernel), m.GoVersion)
	p("%scommand: %s\n", item, code(r.Command))
	for _, t := range r.Targets {
		var parts []string
		for _, a := range [][2]string{{"memcache", t.Memcache}, {"http", t.HTTP}} {
			switch {
			case a[1] == "":
			case t.Spawned: // on new ports for each scenario
				parts = append(parts, a[0])
			default:
				parts = append(parts, a[0]+" "+a[1])
			}
		}
		if t.Version != "" {
			parts = append(parts, "version "+t.Version)
		}
		if t.Spawned {
			parts = append(parts, "spawned afresh for each scenario")
		}
		if t.Baseline {
			parts = append(parts, "**baseline**")
			if !md {
				parts[len(parts)-1] = "BASELINE"
			}
		}
		p("%starget %s: %s\n", item, code(t.Name), strings.Join(parts, ", "))
	}
	for _, wn := range r.Warnings {
		p("%sWARNING: %s\n", item, wn)
	}
	if r.Interrupted {
		p("%sINTERRUPTED: the results below are partial\n", item)
	}
	for i := range r.Results {
		res := &r.Results[i]
		if md {
			p("\n### %s\n\n%s.\n\n", res.Scenario, res.Description)
		} else {
			p("\n== %s: %s\n\n", res.Scenario, res.Description)
		}
		if len(res.Phases) > 0 {
			table(ew, phaseHeader, phaseRows(res))
		}
		if len(res.Tiers) > 0 {
			p("\nThe data centre in each stage, from the nodes' counters over the measurement: L1, the share of reads a proxy answered itself; L1+L2, with those the owner of the key's shard answered (- without that tier); remote, keys fetched from the storage nodes per 1,000 reads; replica conns, the most connections the replicas held at once from proxies / from relays; cache writes, value bytes written to the disk caches of proxies and relays; read, the readers' latency of every read; L1 ≤, a bound on the latency of the reads L1 answered (all reads' quantile at 1-(1-q)·L1 share); L2 fetch ≤ and L3 fetch ≤, the proxies' time to fetch one read's value from the owner of its shard (hit or miss) and from the relays or replicas, each quantile the upper bound of its histogram bucket; load, the machine's 1-minute load average at the end:\n\n")
			table(ew, tierHeader, tierRows(res))
		}
		if rows := cpuRows(res); len(rows) > 0 {
			p("\nThe machine during each phase. CPU in cores (CPU seconds per second of the phase); per request: server CPU time per completed request of any kind, and its ratio to the baseline's in the same phase; others: everything but the server and this tool (the idle target excluded), i.e. the rest of the machine's load; fsync 4 KiB: median time to write and fsync 4 KiB in the servers' work directory just before the phase, the disk's floor under a durable commit:\n\n")
			table(ew, cpuHeader, rows)
		}
		if rows := hopRows(res); len(rows) > 0 {
			p("\nCPU time per write of each process of a chain, from the root down (the processes below the root are part of others above), the whole chain's, and its ratio to the baseline chain's in the same phase:\n\n")
			table(ew, hopHeader(res), rows)
		}
		if rows := engineRows(res); len(rows) > 0 {
			p("\nThe qs storage engine during each phase, from the difference of the server's /metrics (database %s): fsyncs per second (of the log segments, where commits are made durable, and of the engine's write-ahead log), their mean time and the share over 3 ms; the megabytes it wrote (log segments, WAL, flushes, compactions) and their ratio to the bytes of values the writers sent:\n\n", r.Config.DB)
			table(ew, engineHeader, rows)
		}
		if len(res.Ratios) > 0 {
			pairs := map[string]bool{}
			for _, ra := range res.Ratios {
				pairs[ra.Target+" / "+ra.Baseline] = true
			}
			p("\nRatios %s (latency above 1: slower than the baseline; throughput above 1: faster):\n\n", strings.Join(sortedKeys(pairs), ", "))
			table(ew, ratioHeader, ratioRows(res))
		}
		if len(res.Notes) > 0 {
			p("\n")
			for _, n := range res.Notes {
				p("%snote: %s\n", item, n)
			}
		}
		if len(res.Failures) > 0 {
			p("\n")
			for _, f := range res.Failures {
				p("%sFAILED: %s\n", item, f)
			}
		}
		errs := errorLines(res)
		if len(errs) > 0 {
			p("\n")
			for _, e := range errs {
				p("%sERRORS: %s\n", item, e)
			}
		}
	}
	if n := r.Failures(); n > 0 {
		p("\n%d targets could not run a scenario (see FAILED above).\n", n)
	}
	if n := r.Errors(); n > 0 {
		p("\n%d failed requests in this run: the numbers above are not clean.\n", n)
	}
	return ew.err
}

var tierHeader = []string{"stage", "workload", "reads", "L1", "L1+L2", "remote /1000", "replica conns", "cache writes", "read p50 / p99 / p99.9", "L1 ≤", "L2 fetch ≤", "L3 fetch ≤", "load"}

func tierRows(r *Result) [][]string {
	var rows [][]string
	for _, t := range r.Tiers {
		l2 := "-"
		if t.L1L2 >= 0 {
			l2 = fmt.Sprintf("%.3f%%", t.L1L2)
		}
		l := t.Latency
		rows = append(rows, []string{
			t.Stage, t.Workload, fmt.Sprint(t.Reads), fmt.Sprintf("%.3f%%", t.L1), l2,
			fmt.Sprintf("%.2f", t.RemotePer1000), fmt.Sprintf("%d / %d", t.ReplicaConnsProxies, t.ReplicaConnsRelays),
			fmtBytes(t.CacheWriteBytes), fmtUs(l.P50) + " / " + fmtUs(l.P99) + " / " + fmtUs(l.P999),
			fmtTierLatency(t.L1Latency), fmtTierLatency(t.L2Latency), fmtTierLatency(t.L3Latency), fmt.Sprintf("%.2f", t.Load1),
		})
	}
	return rows
}

// fmtTierLatency is a tier's p50 / p99 / p99.9 bounds, "-" when the
// tier answered nothing.
func fmtTierLatency(l TierLatency) string {
	if l.Count == 0 {
		return "-"
	}
	f := func(us float64) string {
		if us == beyondBuckets {
			return "∞"
		}
		return fmtUs(us)
	}
	return f(l.P50) + " / " + f(l.P99) + " / " + f(l.P999)
}

var phaseHeader = []string{"phase", "target", "op", "ops/s", "keys/s", "MB/s", "p50", "p90", "p99", "p99.9", "max", "errors"}

func phaseRows(r *Result) [][]string {
	var rows [][]string
	for _, ph := range r.Phases {
		target := ph.Target
		if ph.Baseline {
			target += " (base)"
		}
		errs := fmt.Sprint(ph.Errors)
		if ph.Errors > 0 {
			errs += " !"
		}
		if len(ph.Ops) == 0 {
			rows = append(rows, []string{ph.Name, target, "-", "-", "-", "-", "-", "-", "-", "-", "-", errs})
		}
		for i, op := range ph.Ops {
			e := ""
			if i == 0 {
				e = errs
			}
			l := op.Latency
			rows = append(rows, []string{
				ph.Name, target, op.Op,
				fmtRate(op.OpsPerSec), fmtRate(op.KeysPerSec), fmtMB(op.MBPerSec),
				fmtUs(l.P50), fmtUs(l.P90), fmtUs(l.P99), fmtUs(l.P999), fmtUs(l.Max), e,
			})
		}
	}
	return rows
}

var cpuHeader = []string{"phase", "target", "server", "per request", "vs base", "client", "others", "fsync 4 KiB"}

// cpuRows has a row per phase with CPU figures, none if no phase has any.
func cpuRows(r *Result) [][]string {
	var rows [][]string
	any := false
	for _, ph := range r.Phases {
		c := ph.CPU
		if c.Server > 0 || c.Machine > 0 {
			any = true
		}
		target := ph.Target
		if ph.Baseline {
			target += " (base)"
		}
		vs := "-"
		if !ph.Baseline {
			for _, b := range r.Phases {
				if b.Baseline && b.Name == ph.Name {
					vs = fmtRatio(ratio(c.ServerPerOp(), b.CPU.ServerPerOp()))
				}
			}
		}
		cores := func(sec float64) string {
			if sec <= 0 || ph.Seconds <= 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", sec/ph.Seconds)
		}
		rows = append(rows, []string{ph.Name, target, cores(c.Server), fmtUs(c.ServerPerOp()), vs, cores(c.Client), cores(c.Others()), fmtUs(ph.DiskSyncMicros)})
	}
	if !any {
		return nil
	}
	return rows
}

// hopHeader names the columns of hopRows: root, hop 1, hop 2, ...
func hopHeader(r *Result) []string {
	h := []string{"phase", "target", "root"}
	n := 0
	for _, ph := range r.Phases {
		n = max(n, len(ph.CPU.Hops))
	}
	for i := 1; i <= n; i++ {
		h = append(h, fmt.Sprintf("hop %d", i))
	}
	return append(h, "chain", "vs base")
}

// hopRows is the CPU time per write of each process of the chains, for
// the phases that measured them.
func hopRows(r *Result) [][]string {
	chainPerWrite := func(ph *Phase) float64 {
		w := ph.Op("write")
		if w == nil {
			return 0
		}
		var sum float64
		for _, us := range ph.CPU.PerWrite(w.Ops) {
			sum += us
		}
		return sum
	}
	n := len(hopHeader(r)) - 5 // hops below the root
	var rows [][]string
	for i := range r.Phases {
		ph := &r.Phases[i]
		w := ph.Op("write")
		if w == nil {
			continue
		}
		us := ph.CPU.PerWrite(w.Ops)
		if us == nil {
			continue
		}
		target := ph.Target
		if ph.Baseline {
			target += " (base)"
		}
		row := []string{ph.Name, target}
		for j := 0; j <= n; j++ {
			if j < len(us) {
				row = append(row, fmtUs(us[j]))
			} else {
				row = append(row, "-")
			}
		}
		vs := "-"
		if !ph.Baseline {
			for k := range r.Phases {
				b := &r.Phases[k]
				if b.Baseline && b.Name == ph.Name {
					vs = fmtRatio(ratio(chainPerWrite(ph), chainPerWrite(b)))
				}
			}
		}
		rows = append(rows, append(row, fmtUs(chainPerWrite(ph)), vs))
	}
	return rows
}

var ratioHeader = []string{"phase", "op", "target / baseline", "p50", "p99", "p99.9", "ops/s"}

func ratioRows(r *Result) [][]string {
	var rows [][]string
	for _, ra := range r.Ratios {
		rows = append(rows, []string{
			ra.Phase, ra.Op, ra.Target + " / " + ra.Baseline,
			fmtRatio(ra.P50), fmtRatio(ra.P99), fmtRatio(ra.P999), fmtRatio(ra.Throughput),
		})
	}
	return rows
}

// errorLines describes every phase with failed requests.
func errorLines(r *Result) []string {
	var out []string
	for _, ph := range r.Phases {
		if ph.Errors == 0 {
			continue
		}
		var kinds []string
		for _, k := range sortedKeys(ph.ErrorKinds) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, ph.ErrorKinds[k]))
		}
		out = append(out, fmt.Sprintf("%s returned errors in phase %q: %d failed requests (%s); first: %s",
			ph.Target, ph.Name, ph.Errors, strings.Join(kinds, ", "), ph.FirstError))
	}
	return out
}

// phaseLine is the one-line progress summary of a phase.
func phaseLine(ph *Phase) string {
	var parts []string
	for _, op := range ph.Ops {
		l := op.Latency
		s := fmt.Sprintf("%s %s/s p50 %s p99 %s p99.9 %s max %s", op.Op, fmtRate(op.OpsPerSec), fmtUs(l.P50), fmtUs(l.P99), fmtUs(l.P999), fmtUs(l.Max))
		if op.MBPerSec >= 1 {
			s += fmt.Sprintf(" (%s MB/s)", fmtMB(op.MBPerSec))
		}
		parts = append(parts, s)
	}
	parts = append(parts, plural(int(ph.Errors), "error"))
	return strings.Join(parts, "; ")
}

func textTable(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	upper := make([]string, len(header))
	for i, h := range header {
		upper[i] = strings.ToUpper(h)
	}
	fmt.Fprintln(tw, strings.Join(upper, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func markdownTable(w io.Writer, header []string, rows [][]string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
		if i >= 3 {
			sep[i] = "--:" // numbers, right-aligned
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}

func fmtRate(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtMB(v float64) string {
	if v == 0 {
		return "-"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// fmtUs formats a latency given in microseconds.
func fmtUs(us float64) string {
	switch {
	case us <= 0:
		return "-"
	case us < 1000:
		return fmt.Sprintf("%.1fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.2fms", us/1e3)
	default:
		return fmt.Sprintf("%.2fs", us/1e6)
	}
}

func fmtRatio(v float64) string {
	if v <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// errWriter keeps the first write error and drops later writes.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return len(b), nil
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, nil
}
