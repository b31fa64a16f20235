package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBenchTiersSmoke runs one stage of qs bench tiers on a small
// dataset: the data centre starts, serves every read with the right
// value, and the report has the stage's row. Nothing is asserted on the
// figures themselves.
func TestBenchTiersSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 13 qs processes")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "run.json")
	text, code := runQSTimeout(t, 5*time.Minute, "bench", "tiers", "--spawn", "--qs-bin", qsBin, "--work-dir", dir,
		"--keys", "1000", "--tiers-stages", "relays", "--tiers-workloads", "regional",
		"--tiers-warmup", "1s", "--duration", "1s", "--out", out)
	if code != 0 {
		t.Fatalf("qs bench tiers exited %d:\n%s", code, text)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Results []struct {
			Scenario string `json:"scenario"`
			Failures []string
			Phases   []struct {
				Errors int64 `json:"errors"`
			} `json:"phases"`
			Tiers []struct {
				Stage    string  `json:"stage"`
				Workload string  `json:"workload"`
				Reads    int64   `json:"reads"`
				L1       float64 `json:"l1_pct"`
				Relays   bool    `json:"relays"`
			} `json:"tiers"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Scenario != "tiers" || len(rep.Results[0].Tiers) != 1 || len(rep.Results[0].Failures) > 0 {
		t.Fatalf("report: %s", raw)
	}
	row := rep.Results[0].Tiers[0]
	if row.Stage != "relays" || row.Workload != "regional" || !row.Relays || row.Reads <= 0 || row.L1 < 0 || row.L1 > 100 {
		t.Errorf("row %+v", row)
	}
	for _, ph := range rep.Results[0].Phases {
		if ph.Errors != 0 {
			t.Errorf("%d failed reads", ph.Errors)
		}
	}
	// Every spawned node was stopped and its data removed.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "run.json" {
			t.Errorf("left in the work directory: %s", e.Name())
		}
	}
}
