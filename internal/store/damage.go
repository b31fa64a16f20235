package store

import (
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// Damage in the storage engine's own files (a table or blob file whose
// block checksum fails) is a finding, never a crash: Pebble's default is
// to call its fatal logger, which would end the process on the first read
// of a damaged block, and again on every restart. Here it is counted in
// integrity_errors_total{kind="engine"}, logged with
// the file and the key range it covers, and the read that met it fails
// with ErrCorrupt (engineErr). Keys elsewhere keep serving; a compaction
// that meets damage fails, is reported (kind="compaction"), and Pebble
// leaves that key range alone for a while before trying again.

// damageListener reports engine damage of database db to its integrity
// counter (in m) and the log.
func damageListener(db string, m *storeMetrics, log *slog.Logger) *pebble.EventListener {
	return &pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			m.integrityErrors.WithLabelValues("engine").Inc()
			log.Error("storage engine file damaged; its keys are not served",
				"db", db, "file", info.Path, "keys", info.Bounds.String(), "err", info.Details)
		},
		BackgroundError: func(err error) {
			if pebble.IsCorruptionError(err) {
				m.integrityErrors.WithLabelValues("compaction").Inc()
				log.Error("storage engine background work met damaged data; retried later", "db", db, "err", err)
				return
			}
			log.Error("storage engine background work failed", "db", db, "err", err)
		},
	}
}

// engineErr turns the engine's corruption errors into ErrCorrupt, so that
// callers (and the API edges) treat them as every other integrity
// failure; other errors are returned unchanged.
func engineErr(err error) error {
	if err == nil || !pebble.IsCorruptionError(err) {
		return err
	}
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		return fmt.Errorf("%w: storage engine file %s (keys %s) damaged: %v", ErrCorrupt, info.Path, info.Bounds.String(), info.Details)
	}
	return fmt.Errorf("%w: storage engine: %v", ErrCorrupt, err)
}
