package bench

import (
	"context"
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// PhaseEngine is what a qs server's storage engine did during a phase: the
// difference of its /metrics (database --db) before and after each slice.
// Only targets with an HTTP address that export the store's engine metrics
// have it. It shows where a durable write's time goes: the fsyncs (of the
// log segments and of Pebble's write-ahead log), and how many bytes the
// store wrote for the bytes of values it was sent.
type PhaseEngine struct {
	// Fsyncs is the number of fsyncs of log segments and of the
	// write-ahead log, and FsyncSeconds their total time; FsyncsOver3ms
	// counts those that took longer than 3 ms.
	Fsyncs        uint64  `json:"fsyncs"`
	FsyncSeconds  float64 `json:"fsync_seconds"`
	FsyncsOver3ms uint64  `json:"fsyncs_over_3ms"`
	// SegmentBytes are the bytes appended to log segments; WALBytes,
	// FlushedBytes and CompactedBytes the bytes Pebble wrote to its WAL,
	// in flushes and in compactions.
	SegmentBytes   float64 `json:"segment_bytes"`
	WALBytes       float64 `json:"wal_bytes"`
	FlushedBytes   float64 `json:"flushed_bytes"`
	CompactedBytes float64 `json:"compacted_bytes"`
}

// Written is every byte the store wrote.
func (e *PhaseEngine) Written() float64 {
	return e.SegmentBytes + e.WALBytes + e.FlushedBytes + e.CompactedBytes
}

func (e *PhaseEngine) add(o PhaseEngine) {
	e.Fsyncs += o.Fsyncs
	e.FsyncSeconds += o.FsyncSeconds
	e.FsyncsOver3ms += o.FsyncsOver3ms
	e.SegmentBytes += o.SegmentBytes
	e.WALBytes += o.WALBytes
	e.FlushedBytes += o.FlushedBytes
	e.CompactedBytes += o.CompactedBytes
}

// engineSample is the store's counters at one moment; ok is false when
// the target did not report them.
type engineSample struct {
	ok                               bool
	fsyncs, fsyncsUnder3ms           uint64
	fsyncSeconds                     float64
	segment, wal, flushed, compacted float64
}

// over3ms is the bucket bound the report splits WAL fsyncs at.
const over3ms = 0.003

// engineSampleTimeout bounds the reading of one engine sample.
const engineSampleTimeout = 2 * time.Second

// sampleEngine reads the engine counters of database db from the /metrics
// of the qs HTTP API at httpAddr. Any failure gives a sample that is not
// ok: the figures are an aid, and their absence is no error.
func sampleEngine(ctx context.Context, httpAddr, db string) engineSample {
	if httpAddr == "" {
		return engineSample{}
	}
	ctx, cancel := context.WithTimeout(ctx, engineSampleTimeout)
	defer cancel()
	mfs, err := scrapeMetrics(ctx, httpAddr)
	if err != nil {
		return engineSample{}
	}
	return engineFrom(mfs, db)
}

// engineFrom picks database db's engine counters out of parsed metrics.
func engineFrom(mfs map[string]*dto.MetricFamily, db string) engineSample {
	var s engineSample
	for _, name := range []string{"qs_store_wal_fsync_seconds", "qs_store_log_segment_fsync_seconds"} {
		for _, m := range ofDB(mfs[name], db) {
			h := m.GetHistogram()
			s.ok = true
			s.fsyncs += h.GetSampleCount()
			s.fsyncSeconds += h.GetSampleSum()
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == over3ms {
					s.fsyncsUnder3ms += b.GetCumulativeCount()
				}
			}
		}
	}
	sum := func(name string) float64 {
		var v float64
		for _, m := range ofDB(mfs[name], db) {
			v += m.GetCounter().GetValue()
		}
		return v
	}
	s.segment = sum("qs_store_log_segment_written_bytes_total")
	s.wal = sum("qs_store_engine_wal_bytes_total")
	s.flushed = sum("qs_store_engine_flushed_bytes_total")
	s.compacted = sum("qs_store_engine_compacted_bytes_total")
	return s
}

// ofDB returns the metrics of family mf labelled db.
func ofDB(mf *dto.MetricFamily, db string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "db" && l.GetValue() == db {
				out = append(out, m)
			}
		}
	}
	return out
}

// engineBetween is what happened between two samples, or false if either
// is missing or the counters went back (the database was replaced or the
// server restarted).
func engineBetween(a, b engineSample) (PhaseEngine, bool) {
	if !a.ok || !b.ok || b.fsyncs < a.fsyncs || b.fsyncsUnder3ms < a.fsyncsUnder3ms ||
		b.segment < a.segment || b.wal < a.wal || b.flushed < a.flushed || b.compacted < a.compacted {
		return PhaseEngine{}, false
	}
	n := b.fsyncs - a.fsyncs
	under := b.fsyncsUnder3ms - a.fsyncsUnder3ms
	return PhaseEngine{
		Fsyncs:         n,
		FsyncSeconds:   b.fsyncSeconds - a.fsyncSeconds,
		FsyncsOver3ms:  n - min(n, under),
		SegmentBytes:   b.segment - a.segment,
		WALBytes:       b.wal - a.wal,
		FlushedBytes:   b.flushed - a.flushed,
		CompactedBytes: b.compacted - a.compacted,
	}, true
}

var engineHeader = []string{"phase", "target", "fsyncs/s", "fsync mean", "fsyncs > 3 ms", "MB written", "per value byte"}

// engineRows is the engine table of a result, or nil if no phase has
// engine figures.
func engineRows(r *Result) [][]string {
	var rows [][]string
	for _, ph := range r.Phases {
		e := ph.Engine
		if e == nil {
			continue
		}
		target := ph.Target
		if ph.Baseline {
			target += " (base)"
		}
		perSec, mean, over, per := "-", "-", "-", "-"
		if ph.Seconds > 0 {
			perSec = fmt.Sprintf("%.0f", float64(e.Fsyncs)/ph.Seconds)
		}
		if e.Fsyncs > 0 {
			mean = fmtUs(e.FsyncSeconds / float64(e.Fsyncs) * 1e6)
			over = fmt.Sprintf("%.1f%%", 100*float64(e.FsyncsOver3ms)/float64(e.Fsyncs))
		}
		var values int64
		for _, op := range ph.Ops {
			if op.Op == "write" || op.Op == "batch" {
				values += op.Bytes
			}
		}
		if values > 0 {
			per = fmt.Sprintf("%.2f", e.Written()/float64(values))
		}
		rows = append(rows, []string{ph.Name, target, perSec, mean, over, fmt.Sprintf("%.1f", e.Written()/1e6), per})
	}
	return rows
}
