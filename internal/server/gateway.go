package server

import (
	"errors"

	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

// gatewayMetrics is the process's one gateway.Metrics, in the process
// registry: every Server of the process counts in it.
var gatewayMetrics = metrics.MustRegister(gateway.NewMetrics())

// openGateway loads the producers file, if configured. Without one, writes
// are open: fine for development, and said loudly at startup.
func (s *Server) openGateway() error {
	if s.cfg.ProducersFile == "" {
		for _, d := range s.cfg.Databases {
			if !d.IsReplica() {
				s.log.Warn("no producers_file: writes are open to anyone who reaches the HTTP API; for development only (see docs/operations.md, Onboarding a producer)")
				break
			}
		}
		return nil
	}
	names := make([]string, len(s.cfg.Databases))
	for i, d := range s.cfg.Databases {
		names[i] = d.Name
	}
	g, err := gateway.Open(gateway.Options{Path: s.cfg.ProducersFile, Databases: names, Logger: s.log, Metrics: gatewayMetrics})
	if err != nil {
		return err
	}
	s.gate = g
	s.log.Info("write gateway on", "producers_file", s.cfg.ProducersFile)
	return nil
}

// ErrNoProducersFile: ReloadProducers without a producers file.
var ErrNoProducersFile = errors.New("qs: no producers_file configured; nothing to reload")

// ReloadProducers reads the producers file again now (qs serve calls it on
// SIGHUP). It reports whether the content changed; on error the producers
// in force stay.
func (s *Server) ReloadProducers() (changed bool, err error) {
	if s.gate == nil {
		return false, ErrNoProducersFile
	}
	return s.gate.Reload()
}
