package pgbridge

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/bridge"
)

// TestErrorKinds: configuration errors stop the bridge under their metric
// kind; everything else is retried.
func TestErrorKinds(t *testing.T) {
	fatal := map[error]string{
		ErrNoPrimaryKey:                                 "config",
		fmt.Errorf("x: %w", ErrWALLevel):                "config",
		ErrPermission:                                   "config",
		ErrSlotElsewhere:                                "config",
		&pgconn.PgError{Code: "42501"}:                  "config",
		bridge.ErrOtherSource:                           "config",
		ErrSlotLost:                                     "slot_lost",
		bridge.ErrStateConflict:                         "conflict",
		fmt.Errorf("%w: bad", ErrDecode):                "decode",
		&client.Error{Status: 403, Code: "x"}:           "write",
		writeError{&client.Error{Status: 413}}:          "write",
		writeError{&client.Error{Status: 400}}:          "write",
		fmt.Errorf("x: %w", &client.Error{Status: 409}): "write",
	}
	for err, kind := range fatal {
		if got := fatalKind(err); got != kind {
			t.Errorf("fatalKind(%v) = %q, want %q", err, got, kind)
		}
	}
	for err, kind := range map[error]string{
		errors.New("connection refused"):        "source",
		ErrSlotInUse:                            "slot_in_use",
		writeError{bridge.ErrStateMoved}:        "moved",
		bridge.ErrStateMoved:                    "moved",
		writeError{&client.Error{Status: 503}}:  "write",
		writeError{&client.Error{Status: 429}}:  "write",
		writeError{errors.New("reset by peer")}: "write",
	} {
		if got := fatalKind(err); got != "" {
			t.Errorf("fatalKind(%v) = %q, want retried", err, got)
		}
		if got := transientKind(err); got != kind {
			t.Errorf("transientKind(%v) = %q, want %q", err, got, kind)
		}
	}
}

func TestProgressLine(t *testing.T) {
	p := newProgress(Config{Table: "records"}, 1000)
	got := p.line(250, p.start.Add(2*time.Second))
	if want := "copy records: 250 rows, 125 rows/s, about 25% of 1000"; got != want {
		t.Fatalf("line = %q, want %q", got, want)
	}
	// The planner's estimate may be short: no percentage beyond it.
	if got := p.line(1500, p.start.Add(time.Second)); got != "copy records: 1500 rows, 1500 rows/s" {
		t.Fatalf("line = %q", got)
	}
}
