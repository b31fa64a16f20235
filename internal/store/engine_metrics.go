package store

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// stallListener counts the engine's write stalls in m.
func stallListener(m *storeMetrics) *pebble.EventListener {
	var mu sync.Mutex
	var began time.Time
	return &pebble.EventListener{
		WriteStallBegin: func(pebble.WriteStallBeginInfo) {
			mu.Lock()
			began = time.Now()
			mu.Unlock()
			m.writeStalls.Inc()
		},
		WriteStallEnd: func() {
			mu.Lock()
			if !began.IsZero() {
				m.writeStallSeconds.Add(time.Since(began).Seconds())
				began = time.Time{}
			}
			mu.Unlock()
		},
	}
}
