package store

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quicksilver-kv/qs/internal/metrics"
)

// The space of the filesystem each store lives on, read at each scrape
// (by the engine collector), so that an alert can fire before writes are
// refused at the reserve.
var (
	dDiskAvail = prometheus.NewDesc(metrics.Namespace+"_store_disk_avail_bytes",
		"Free space on the filesystem of the database's directory (for unprivileged users).", []string{"db"}, nil)
	dDiskTotal = prometheus.NewDesc(metrics.Namespace+"_store_disk_total_bytes",
		"Size of the filesystem of the database's directory.", []string{"db"}, nil)
	dDiskReserve = prometheus.NewDesc(metrics.Namespace+"_store_disk_reserve_bytes",
		"Free space below which writes are refused (min_free_bytes).", []string{"db"}, nil)
)

func collectDisk(ch chan<- prometheus.Metric, s *Store) {
	du, err := s.opts.FS.GetDiskUsage(s.opts.Dir)
	if err != nil {
		return
	}
	db := s.opts.Name
	ch <- prometheus.MustNewConstMetric(dDiskAvail, prometheus.GaugeValue, float64(du.AvailBytes), db)
	ch <- prometheus.MustNewConstMetric(dDiskTotal, prometheus.GaugeValue, float64(du.TotalBytes), db)
	ch <- prometheus.MustNewConstMetric(dDiskReserve, prometheus.GaugeValue, float64(s.opts.MinFreeBytes), db)
}

// initErrorSeries creates the error series an alert or a dashboard
// watches, at 0, so that they exist before the first error.
func (m *storeMetrics) initErrorSeries() {
	for _, k := range []string{"value_crc", "log_value_crc", "chunk_crc", "log_block"} {
		m.integrityErrors.WithLabelValues(k)
	}
	for _, k := range []string{"disk_full", "write_failed", "corrupt"} {
		m.writeErrors.WithLabelValues(k)
	}
}
