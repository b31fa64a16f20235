package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
)

// directWriteMax is the largest value a GET writes to the client while its
// view is open. A larger value is copied and the view closed first, so that
// a slow client never keeps a view (and the storage it pins) open.
const directWriteMax = 32 << 10

var errEmptyKey = errorf(codeBadRequest, "qs: empty key")

// get serves GET /v1/{db}/keys/{key...}: the raw value, with the index that
// wrote it and the index the read was served at in headers.
func (h *handler) get(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	return h.getKey(w, r, d, r.PathValue("key"))
}

// getKey answers a GET of key, named by the request's path.
func (h *handler) getKey(w http.ResponseWriter, r *http.Request, d *service.Database, key string) int {
	if key == "" {
		return h.fail(w, r, d, errEmptyKey)
	}
	if r.URL.RawQuery != "" {
		q, err := parseQuery(r.URL.RawQuery, "min_index", "timeout")
		if err != nil {
			return h.fail(w, r, d, err)
		}
		if status := h.awaitParams(w, r, d, q); status != 0 {
			return status
		}
	}
	d.Reads.ObserveString(key)
	// Small values are written while the lookup holds them; larger ones
	// are copied first, so a slow client never keeps a view (and the
	// storage it pins) open.
	var large []byte
	var largeIdx uint64
	status := 0
	at, err := d.Store.LookupItems([][]byte{[]byte(key)}, func(at uint64, _ int, it store.Item, found bool) error {
		val, idx := it.Value, it.Index
		if found && it.Flags != 0 {
			w.Header()["Qs-Flags"] = []string{strconv.FormatUint(uint64(it.Flags), 10)}
		}
		if found && it.Expires != 0 {
			w.Header()["Qs-Expires"] = []string{strconv.FormatInt(it.Expires, 10)}
		}
		switch {
		case !found:
			w.Header()["Qs-Applied-Index"] = []string{strconv.FormatUint(at, 10)}
			status = h.m.writeErrorBody(w, codeNotFound, notFoundKeyBody)
		case len(val) > directWriteMax:
			large, largeIdx = bytes.Clone(val), idx
		default:
			setValueHeaders(w.Header(), len(val), idx, at)
			w.Write(val)
			status = http.StatusOK
		}
		return nil
	})
	switch {
	case err != nil:
		return h.fail(w, r, d, err)
	case status != 0:
		return status
	}
	setValueHeaders(w.Header(), len(large), largeIdx, at)
	w.Write(large)
	return http.StatusOK
}

// setValueHeaders sets the headers of a GET answer with two allocations:
// one string holding the three numbers and one slice holding the values.
func setValueHeaders(h http.Header, n int, index, applied uint64) {
	var buf [3 * 20]byte
	b := strconv.AppendInt(buf[:0], int64(n), 10)
	e1 := len(b)
	b = strconv.AppendUint(b, index, 10)
	e2 := len(b)
	b = strconv.AppendUint(b, applied, 10)
	s := string(b)
	vals := make([]string, 3)
	vals[0], vals[1], vals[2] = s[:e1], s[e1:e2], s[e2:]
	h["Content-Type"] = octetContentType
	h["Content-Length"] = vals[0:1:1]
	h["Qs-Index"] = vals[1:2:2]
	h["Qs-Applied-Index"] = vals[2:3:3]
}

// awaitParams reads min_index and timeout from q and waits for the index.
// It returns 0 when the read may go on, or the status of the error answer
// it sent.
func (h *handler) awaitParams(w http.ResponseWriter, r *http.Request, d *service.Database, q url.Values) int {
	var minIndex uint64
	if v, ok := q["min_index"]; ok {
		n, err := strconv.ParseUint(v[0], 10, 64)
		if err != nil {
			return h.fail(w, r, d, errorf(codeBadRequest, "qs: min_index %q is not an index", v[0]))
		}
		minIndex = n
	}
	wait := h.cfg.DefaultWait
	if v, ok := q["timeout"]; ok {
		t, err := time.ParseDuration(v[0])
		if err != nil || t <= 0 {
			return h.fail(w, r, d, errorf(codeBadRequest, "qs: timeout %q is not a positive duration such as 2s or 500ms", v[0]))
		}
		wait = min(t, h.cfg.MaxWait)
	}
	return h.await(w, r, d, minIndex, wait)
}

// await waits up to wait for d to apply minIndex, for read-your-writes
// across nodes. It returns 0 when the read may go on, or the status of the
// error answer it sent: 504 timeout with the applied index in the
// Qs-Applied-Index header and the body.
func (h *handler) await(w http.ResponseWriter, r *http.Request, d *service.Database, minIndex uint64, wait time.Duration) int {
	if d.Store.AppliedIndex() >= minIndex {
		return 0
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	applied, err := d.Store.WaitApplied(ctx, minIndex)
	cancel()
	h.m.minIndexWait.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.DeadlineExceeded):
		h.m.minIndexTimeouts.Inc()
		w.Header().Set("Qs-Applied-Index", strconv.FormatUint(applied, 10))
		return h.m.writeError(w, codeTimeout, fmt.Errorf("qs: index %d not applied within %v; applied index is %d", minIndex, wait, applied), &applied)
	default:
		return h.fail(w, r, d, err)
	}
}

// errPageFull stops a scan whose page reached MaxResponseBytes.
var errPageFull = errors.New("page full")

// scan serves GET /v1/{db}/keys?prefix=P&start=K&limit=L: one page of keys
// with prefix, from the first key ≥ start, in key order.
func (h *handler) scan(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	var prefix, start string
	limit := h.cfg.DefaultScanLimit
	if r.URL.RawQuery != "" {
		q, err := parseQuery(r.URL.RawQuery, "prefix", "start", "limit", "min_index", "timeout")
		if err != nil {
			return h.fail(w, r, d, err)
		}
		prefix, start = q.Get("prefix"), q.Get("start")
		if v, ok := q["limit"]; ok {
			n, err := strconv.Atoi(v[0])
			if err != nil || n < 1 {
				return h.fail(w, r, d, errorf(codeBadRequest, "qs: limit %q is not a positive number", v[0]))
			}
			limit = min(n, h.cfg.MaxScanLimit)
		}
		if status := h.awaitParams(w, r, d, q); status != 0 {
			return status
		}
	}
	v, err := d.Store.View()
	if err != nil {
		return h.fail(w, r, d, err)
	}
	at := v.Index()
	a := &answer{w: w, m: h.m, applied: at, buf: make([]byte, 0, 4<<10)}
	a.buf = append(a.buf, `{"index":`...)
	a.buf = strconv.AppendUint(a.buf, at, 10)
	a.buf = append(a.buf, `,"items":[`...)
	n := 0
	var stoppedAt []byte
	next, err := v.Scan([]byte(prefix), []byte(start), limit, func(key, value []byte, index uint64) error {
		if n > 0 && a.size()+itemBytesMax(key, value) > h.cfg.MaxResponseBytes {
			stoppedAt = bytes.Clone(key)
			return errPageFull
		}
		if n > 0 {
			a.buf = append(a.buf, ',')
		}
		a.buf = append(a.buf, `{"key":`...)
		a.buf = appendJSONString(a.buf, key)
		a.buf = append(a.buf, `,"value":"`...)
		a.buf = base64.StdEncoding.AppendEncode(a.buf, value)
		a.buf = append(a.buf, `","index":`...)
		a.buf = strconv.AppendUint(a.buf, index, 10)
		a.buf = append(a.buf, '}')
		n++
		return a.flushIfLarge()
	})
	v.Close()
	if errors.Is(err, errPageFull) {
		next, err = stoppedAt, nil
	}
	if err != nil {
		if a.started {
			h.log.Warn("scan answer cut part way", "db", d.Name, "err", err)
			a.abort()
		}
		return h.fail(w, r, d, err)
	}
	a.buf = append(a.buf, ']')
	if next != nil {
		a.buf = append(a.buf, `,"next":`...)
		a.buf = appendJSONString(a.buf, next)
	}
	a.buf = append(a.buf, "}\n"...)
	return a.finish()
}

// itemBytesMax bounds the JSON size of one scan item.
func itemBytesMax(key, value []byte) int {
	return 6*len(key) + base64.StdEncoding.EncodedLen(len(value)) + 64
}

// appendJSONString appends s as a JSON string. Bytes that are not valid
// UTF-8 become U+FFFD, as encoding/json does.
func appendJSONString(dst, s []byte) []byte {
	b, err := json.Marshal(string(s))
	if err != nil { // a string always encodes
		panic(err)
	}
	return append(dst, b...)
}

// writeJSON sends a successful JSON answer read at index applied.
func writeJSON(w http.ResponseWriter, applied uint64, body []byte) int {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["Qs-Applied-Index"] = []string{strconv.FormatUint(applied, 10)}
	w.Write(body)
	return http.StatusOK
}

// mgetRequest is the body of POST /v1/{db}/mget.
type mgetRequest struct {
	Keys []string `json:"keys"`
}

// mget serves POST /v1/{db}/mget: the values of several keys, read at one
// index. Absent keys are left out of the answer.
func (h *handler) mget(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	var q url.Values
	if r.URL.RawQuery != "" {
		var err error
		if q, err = parseQuery(r.URL.RawQuery, "min_index", "timeout"); err != nil {
			return h.fail(w, r, d, err)
		}
	}
	body, err := readBody(w, r, h.cfg.MaxBodyBytes)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	var req mgetRequest
	if err := decodeStrict(body, &req); err != nil {
		return h.fail(w, r, d, err)
	}
	if req.Keys == nil {
		return h.fail(w, r, d, errorf(codeBadRequest, `qs: mget needs "keys", a list of strings`))
	}
	if len(req.Keys) > h.cfg.MaxMgetKeys {
		return h.fail(w, r, d, errorf(codeTooLarge, "qs: mget of %d keys, limit %d", len(req.Keys), h.cfg.MaxMgetKeys))
	}
	for i, k := range req.Keys {
		if k == "" {
			return h.fail(w, r, d, errorf(codeBadRequest, "qs: key %d is empty", i))
		}
	}
	if q != nil {
		if status := h.awaitParams(w, r, d, q); status != 0 {
			return status
		}
	}
	a := &answer{w: w, m: h.m, buf: make([]byte, 0, 4<<10)}
	if err := h.lookupValues(d.Store, req.Keys, a); err != nil {
		if a.started {
			h.log.Warn("mget answer cut part way", "db", d.Name, "err", err)
			a.abort()
		}
		return h.fail(w, r, d, err)
	}
	for _, k := range req.Keys {
		d.Reads.ObserveString(k)
	}
	return a.finish()
}

// lookupValues builds the mget answer into a, all keys read at one index.
func (h *handler) lookupValues(st *store.Store, keys []string, a *answer) error {
	kbs := make([][]byte, 0, len(keys))
	var seen map[string]struct{}
	if len(keys) > 1 {
		seen = make(map[string]struct{}, len(keys))
	}
	for _, k := range keys {
		if seen != nil {
			if _, dup := seen[k]; dup {
				continue
			}
			seen[k] = struct{}{}
		}
		kbs = append(kbs, []byte(k))
	}
	n := 0
	at, err := st.Lookup(kbs, func(at uint64, i int, val []byte, _ uint64, found bool) error {
		if i == 0 {
			a.applied = at
			a.buf = append(a.buf, `{"index":`...)
			a.buf = strconv.AppendUint(a.buf, at, 10)
			a.buf = append(a.buf, `,"values":{`...)
		}
		if !found {
			return nil
		}
		kb := kbs[i]
		if a.size()+itemBytesMax(kb, val) > h.cfg.MaxResponseBytes {
			return errorf(codeTooLarge, "qs: mget answer exceeds %d bytes; ask for fewer keys", h.cfg.MaxResponseBytes)
		}
		if n > 0 {
			a.buf = append(a.buf, ',')
		}
		a.buf = appendJSONString(a.buf, kb)
		a.buf = append(a.buf, `:"`...)
		a.buf = base64.StdEncoding.AppendEncode(a.buf, val)
		a.buf = append(a.buf, '"')
		n++
		return a.flushIfLarge()
	})
	if err != nil {
		return err
	}
	if len(kbs) == 0 {
		a.applied = at
		a.buf = append(a.buf, `{"index":`...)
		a.buf = strconv.AppendUint(a.buf, at, 10)
		a.buf = append(a.buf, `,"values":{`...)
	}
	a.buf = append(a.buf, "}}\n"...)
	return nil
}
