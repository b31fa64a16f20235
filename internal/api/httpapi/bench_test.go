package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// BenchmarkGet measures the single-key GET handler, routing included, with
// a 100-byte value.
func BenchmarkGet(b *testing.B) {
	st := openStore(b, store.Options{})
	val := make([]byte, 100)
	if _, err := st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("config/service/key"), Value: val}}}); err != nil {
		b.Fatal(err)
	}
	h := New(Config{}, service.Databases{"db": &service.Database{Name: "db", Store: st}}, nil)
	b.Run("recorder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/db/keys/config/service/key", nil))
			if w.Code != http.StatusOK || w.Body.Len() != len(val) {
				b.Fatalf("status %d, %d bytes", w.Code, w.Body.Len())
			}
		}
	})
	// The handler alone: one request and a writer that keeps nothing and,
	// like net/http's, takes deadlines, so that only the handler's own
	// allocations are counted.
	b.Run("handler", func(b *testing.B) {
		req := httptest.NewRequest("GET", "/v1/db/keys/config/service/key", nil)
		w := &discardWriter{h: make(http.Header, 8)}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			w.status, w.n = 0, 0
			h.ServeHTTP(w, req)
			if w.n != len(val) {
				b.Fatalf("status %d, %d bytes", w.status, w.n)
			}
		}
		b.ReportMetric(float64(w.deadlines)/float64(b.N), "deadlines/op")
	})
}

type discardWriter struct {
	h         http.Header
	status    int
	n         int
	deadlines int
}

func (w *discardWriter) SetWriteDeadline(time.Time) error { w.deadlines++; return nil }
func (w *discardWriter) SetReadDeadline(time.Time) error  { return nil }

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(s int)   { w.status = s }
func (w *discardWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}
