package store

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// logClockAhead returns qs_store_log_clock_ahead_seconds of db, and
// whether it is reported.
func logClockAhead(t *testing.T, db string) (float64, bool) {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	go func() { logClockCollector{}.Collect(ch); close(ch) }()
	v, found := 0.0, false
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "db" && l.GetValue() == db {
				v, found = pb.GetGauge().GetValue(), true
			}
		}
	}
	return v, found
}

// A root whose clock runs an hour ahead dates its log an hour ahead, which
// replica lag (never below 0) cannot show; the log clock's distance from
// local time does.
func TestLogClockAheadIsReported(t *testing.T) {
	const ahead, behind = "log-clock-ahead", "log-clock-behind"
	a := openTest(t, Options{Name: ahead, Now: func() time.Time { return time.Now().Add(time.Hour) }})
	b := openTest(t, Options{Name: behind, Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if _, found := logClockAhead(t, ahead); found {
		t.Fatal("reported before any entry was applied")
	}
	mustWrite(t, a, set("k", "v"))
	mustWrite(t, b, set("k", "v"))
	if v, found := logClockAhead(t, ahead); !found || v < 50*60 || v > 70*60 {
		t.Errorf("log clock an hour ahead reported as %v s (found %v)", v, found)
	}
	if v, found := logClockAhead(t, behind); !found || v > -50*60 {
		t.Errorf("log clock an hour behind reported as %v s (found %v)", v, found)
	}
}
