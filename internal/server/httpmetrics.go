package server

import (
	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/metrics"
)

// httpMetrics is the process's one httpapi.Metrics, in the process
// registry: the handlers and connection limits of every Server of the
// process count in it.
var httpMetrics = metrics.MustRegister(httpapi.NewMetrics())

// httpConfig is the configuration of the HTTP API's handlers.
func httpConfig() httpapi.Config {
	c := httpapi.DefaultConfig()
	c.Metrics = httpMetrics
	return c
}
