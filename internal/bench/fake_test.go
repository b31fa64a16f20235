package bench

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// fakeStore is the in-memory data of the fake servers, with switches to
// make them misbehave.
type fakeStore struct {
	mu struct {
		sync.Mutex
		m     map[string][]byte
		index uint64
	}
	failSets  atomic.Bool  // answer sets with SERVER_ERROR
	failAfter atomic.Int64 // if n > 0, answer sets beyond the nth with SERVER_ERROR
	failGets  atomic.Bool  // answer gets with SERVER_ERROR
	hangGets  atomic.Bool  // never answer gets
	failBatch atomic.Bool  // answer batches with 500
	dropEvery atomic.Int64 // if n > 0, acknowledge but forget every nth set
	sets      atomic.Int64
	httpGets  atomic.Int64
}

func newFakeStore() *fakeStore {
	s := &fakeStore{}
	s.mu.m = map[string][]byte{}
	return s
}

func (s *fakeStore) set(k string, v []byte) uint64 {
	n := s.sets.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.index++
	if d := s.dropEvery.Load(); d > 0 && n%d == 0 {
		return s.mu.index
	}
	s.mu.m[k] = v
	return s.mu.index
}

func (s *fakeStore) get(k string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.mu.m[k]
	return v, ok
}

func (s *fakeStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.m)
}

// fakeMC is a tiny memcached: get/gets, set, delete, version.
type fakeMC struct {
	st    *fakeStore
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func startFakeMC(st *fakeStore, addr string) (*fakeMC, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f := &fakeMC{st: st, ln: ln, conns: map[net.Conn]bool{}}
	f.wg.Go(f.accept)
	return f, nil
}

func (f *fakeMC) Addr() string { return f.ln.Addr().String() }

func (f *fakeMC) Close() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *fakeMC) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns[c] = true
		f.mu.Unlock()
		f.wg.Go(func() {
			f.serve(c)
			f.mu.Lock()
			delete(f.conns, c)
			f.mu.Unlock()
			c.Close()
		})
	}
}

func (f *fakeMC) serve(c net.Conn) {
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			fmt.Fprint(w, "ERROR\r\n")
			w.Flush()
			continue
		}
		switch fields[0] {
		case "get", "gets":
			if f.st.hangGets.Load() {
				io.Copy(io.Discard, r) // until the client gives up
				return
			}
			if f.st.failGets.Load() {
				fmt.Fprint(w, "SERVER_ERROR fake get failure\r\n")
				break
			}
			for _, k := range fields[1:] {
				if v, ok := f.st.get(k); ok {
					fmt.Fprintf(w, "VALUE %s 0 %d\r\n", k, len(v))
					w.Write(v)
					w.WriteString("\r\n")
				}
			}
			w.WriteString("END\r\n")
		case "set":
			if len(fields) < 5 {
				fmt.Fprint(w, "CLIENT_ERROR bad command line format\r\n")
				break
			}
			n, err := strconv.Atoi(fields[4])
			if err != nil {
				fmt.Fprint(w, "CLIENT_ERROR bad command line format\r\n")
				break
			}
			data := make([]byte, n+2)
			if _, err := io.ReadFull(r, data); err != nil {
				return
			}
			if f.st.failSets.Load() || (f.st.failAfter.Load() > 0 && f.st.sets.Load() >= f.st.failAfter.Load()) {
				fmt.Fprint(w, "SERVER_ERROR fake set failure\r\n")
				break
			}
			f.st.set(fields[1], data[:n])
			w.WriteString("STORED\r\n")
		case "delete":
			w.WriteString("NOT_FOUND\r\n")
		case "version":
			w.WriteString("VERSION fake-1\r\n")
		default:
			w.WriteString("ERROR\r\n")
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// fakeHTTP serves POST /v1/{db}/batch, GET /v1/{db}/keys/{key}, and GET /metrics with engine
// counters that grow with the sets: one WAL fsync per set, one in ten over
// 3 ms, 1,000 bytes written to the WAL and 500 flushed per set.
func fakeHTTP(st *fakeStore, db string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/{db}/keys/{key}", func(w http.ResponseWriter, r *http.Request) {
		st.httpGets.Add(1)
		v, ok := st.get(r.PathValue("key"))
		switch {
		case r.PathValue("db") != db:
			http.Error(w, `{"error":"no such database"}`, http.StatusNotFound)
		case st.failGets.Load():
			http.Error(w, `{"error":"fake failure"}`, http.StatusInternalServerError)
		case !ok:
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		default:
			w.Write(v)
		}
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		n := st.sets.Load()
		fmt.Fprintf(w, `# TYPE qs_store_wal_fsync_seconds histogram
qs_store_wal_fsync_seconds_bucket{db=%[1]q,le="0.001"} %[3]d
qs_store_wal_fsync_seconds_bucket{db=%[1]q,le="0.003"} %[3]d
qs_store_wal_fsync_seconds_bucket{db=%[1]q,le="+Inf"} %[2]d
qs_store_wal_fsync_seconds_sum{db=%[1]q} %[4]g
qs_store_wal_fsync_seconds_count{db=%[1]q} %[2]d
# TYPE qs_store_engine_wal_bytes_total counter
qs_store_engine_wal_bytes_total{db=%[1]q} %[5]d
# TYPE qs_store_engine_flushed_bytes_total counter
qs_store_engine_flushed_bytes_total{db=%[1]q,kind="blob"} %[6]d
qs_store_engine_flushed_bytes_total{db=%[1]q,kind="table"} 0
# TYPE qs_store_engine_compacted_bytes_total counter
qs_store_engine_compacted_bytes_total{db=%[1]q,kind="blob"} 0
qs_store_engine_compacted_bytes_total{db=%[1]q,kind="table"} 0
`, db, n, n-n/10, float64(n)*0.0005, n*1000, n*500)
	})
	mux.HandleFunc("POST /v1/{db}/batch", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("db") != db {
			http.Error(w, `{"error":"no such database"}`, http.StatusNotFound)
			return
		}
		if st.failBatch.Load() {
			http.Error(w, `{"error":"fake failure"}`, http.StatusInternalServerError)
			return
		}
		var req struct {
			Ops []struct {
				Op    string `json:"op"`
				Key   string `json:"key"`
				Value string `json:"value"`
			} `json:"ops"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Ops) == 0 {
			http.Error(w, `{"error":"bad batch"}`, http.StatusBadRequest)
			return
		}
		var idx uint64
		for _, op := range req.Ops {
			v, err := base64.StdEncoding.DecodeString(op.Value)
			if op.Op != "set" || op.Key == "" || err != nil {
				http.Error(w, `{"error":"bad op"}`, http.StatusBadRequest)
				return
			}
			idx = st.set(op.Key, v)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"index":%d}`, idx)
	})
	return mux
}

// fakeServeEnv makes the test binary act as `qs serve` (see TestMain). Its
// value picks the behaviour:
//
//	ok      print both listeners, as log lines, and serve until SIGTERM
//	exit    print an error and exit 3
//	silent  print nothing and wait
//	mconly  print only the memcache listener and serve
const fakeServeEnv = "QS_BENCH_FAKE_SERVE"

func fakeServe(mode string, args []string) int {
	var data, httpAddr, mcAddr, replAddr string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--repl":
			replAddr = args[i+1]
		case "--data":
			data = args[i+1]
		case "--http":
			httpAddr = args[i+1]
		case "--memcache":
			mcAddr = args[i+1]
		case "--config":
			if _, err := os.Stat(args[i+1]); err != nil {
				fmt.Fprintf(os.Stderr, "fake qs: config: %v\n", err)
				return 2
			}
		}
	}
	if len(args) == 0 || args[0] != "serve" || data == "" || httpAddr == "" || mcAddr == "" {
		fmt.Fprintf(os.Stderr, "fake qs: bad arguments %q\n", args)
		return 2
	}
	if _, err := os.Stat(data); err != nil {
		fmt.Fprintf(os.Stderr, "fake qs: %v\n", err)
		return 2
	}
	switch mode {
	case "exit":
		fmt.Println("starting")
		fmt.Fprintln(os.Stderr, "fake qs: cannot open the store: disk on fire")
		return 3
	case "silent":
		time.Sleep(time.Minute)
		return 0
	}
	st := newFakeStore()
	mc, err := startFakeMC(st, mcAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer mc.Close()
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := &http.Server{Handler: fakeHTTP(st, "default")}
	go srv.Serve(ln)
	defer srv.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	if mode != "mconly" {
		fmt.Printf("2026/01/02 15:04:05 INFO http listening on %s\n", ln.Addr())
	}
	fmt.Printf("2026/01/02 15:04:05 INFO memcache listening on %s db=default\n", mc.Addr())
	fmt.Printf("unix listening on %s/sock db=default\n", data)
	if replAddr != "" && replAddr != "off" {
		// Like qs: the replication listener comes last, a moment later.
		time.Sleep(50 * time.Millisecond)
		fmt.Printf("repl listening on 127.0.0.1:1\n")
	}
	<-sig
	return 0
}
