package httpapi

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// put serves PUT /v1/{db}/keys/{key...}: the body is the new value.
func (h *handler) put(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	return h.writeKey(w, r, d, wal.OpSet)
}

// delete serves DELETE /v1/{db}/keys/{key...}. Deleting an absent key is
// not an error: it answers 200 with "changed": false.
func (h *handler) delete(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	return h.writeKey(w, r, d, wal.OpDelete)
}

func (h *handler) writeKey(w http.ResponseWriter, r *http.Request, d *service.Database, op wal.OpType) int {
	key := r.PathValue("key")
	if key == "" {
		return h.fail(w, r, d, errEmptyKey)
	}
	var conds []store.Cond
	var expires int64
	if r.URL.RawQuery != "" {
		q, err := parseQuery(r.URL.RawQuery, "if_index", "ttl")
		if err != nil {
			return h.fail(w, r, d, err)
		}
		if v, ok := q["ttl"]; ok {
			n, err := strconv.ParseUint(v[0], 10, 32)
			if err != nil || n == 0 || op != wal.OpSet {
				return h.fail(w, r, d, errorf(codeBadRequest, "qs: ttl %q is not a number of seconds from 1 to 4294967295 on a PUT", v[0]))
			}
			expires = time.Now().UnixNano() + int64(n)*int64(time.Second)
		}
		if v, ok := q["if_index"]; ok {
			n, err := strconv.ParseUint(v[0], 10, 64)
			if err != nil {
				return h.fail(w, r, d, errorf(codeBadRequest, "qs: if_index %q is not an index", v[0]))
			}
			conds = []store.Cond{{Key: []byte(key), Index: n}}
		}
	}
	flags, err := flagsHeader(r, op)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	if err := d.CanWrite(); err != nil {
		return h.fail(w, r, d, err)
	}
	b := store.Batch{Ops: []wal.Op{{Type: op, Key: []byte(key), Flags: flags, Expires: expires}}, Conds: conds}
	p, err := authenticate(d, r)
	if err == nil {
		err = authorize(d, p, b.Ops) // before reading a body that would be refused
	}
	if err != nil {
		return h.fail(w, r, d, err)
	}
	if op == wal.OpSet {
		body, err := readBody(w, r, h.cfg.MaxBodyBytes)
		if err != nil {
			return h.fail(w, r, d, err)
		}
		b.Ops[0].Value = body
	}
	if err := admit(r, p, b); err != nil {
		return h.fail(w, r, d, err)
	}
	return h.commit(w, r, d, b)
}

// flagsHeader returns the client flags a PUT stores (its Qs-Flags header,
// a 32-bit unsigned decimal number; 0 without it). A DELETE stores none:
// the header is refused there.
func flagsHeader(r *http.Request, op wal.OpType) (uint32, error) {
	v, ok := r.Header["Qs-Flags"]
	switch {
	case !ok:
		return 0, nil
	case op != wal.OpSet:
		return 0, errorf(codeBadRequest, "qs: Qs-Flags is stored with a value: PUT only")
	case len(v) != 1:
		return 0, errorf(codeBadRequest, "qs: Qs-Flags must be given once")
	}
	n, err := strconv.ParseUint(v[0], 10, 32)
	if err != nil {
		return 0, errorf(codeBadRequest, "qs: Qs-Flags %q is not a number from 0 to 4294967295", v[0])
	}
	return uint32(n), nil
}

// batch serves POST /v1/{db}/batch: several operations applied atomically,
// under optional compare-and-swap conditions.
func (h *handler) batch(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	if r.URL.RawQuery != "" {
		if _, err := parseQuery(r.URL.RawQuery); err != nil {
			return h.fail(w, r, d, err)
		}
	}
	if err := d.CanWrite(); err != nil {
		return h.fail(w, r, d, err)
	}
	p, err := authenticate(d, r)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	body, err := readBody(w, r, h.cfg.MaxBodyBytes)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	b, err := decodeBatch(body)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	if err := authorize(d, p, b.Ops); err != nil { // every op, before any is written
		return h.fail(w, r, d, err)
	}
	if err := admit(r, p, b); err != nil {
		return h.fail(w, r, d, err)
	}
	return h.commit(w, r, d, b)
}

// commit writes b and answers {"index":N,"changed":bool} once it is
// durable, with "duplicate":true when the request's Idempotency-Key was
// seen before (nothing applied; the first attempt's outcome).
func (h *handler) commit(w http.ResponseWriter, r *http.Request, d *service.Database, b store.Batch) int {
	if k := r.Header["Idempotency-Key"]; len(k) > 0 {
		if len(k) > 1 || k[0] == "" || len(k[0]) > store.MaxBatchIDBytes {
			return h.fail(w, r, d, errorf(codeBadRequest, "qs: Idempotency-Key must be one value of 1 to %d bytes", store.MaxBatchIDBytes))
		}
		b.ID = []byte(k[0])
	}
	res, err := d.Write(r.Context(), b)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	buf := make([]byte, 0, 64)
	buf = append(buf, `{"index":`...)
	buf = strconv.AppendUint(buf, res.Index, 10)
	buf = append(buf, `,"changed":`...)
	buf = strconv.AppendBool(buf, res.Changed)
	if res.Duplicate {
		buf = append(buf, `,"duplicate":true`...)
	}
	buf = append(buf, "}\n"...)
	hd := w.Header()
	hd["Content-Type"] = jsonContentType
	hd["Content-Length"] = []string{strconv.Itoa(len(buf))}
	w.Write(buf)
	return http.StatusOK
}

// preallocMax bounds the buffer allocated up front from a Content-Length,
// which a client can claim without sending the bytes.
const preallocMax = 1 << 20

// readBody reads the whole request body, up to limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errorf(codeTooLarge, "qs: request body of %d bytes exceeds the limit of %d", r.ContentLength, limit)
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(min(r.ContentLength, preallocMax)) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(codeTooLarge, "qs: request body exceeds the limit of %d bytes", limit)
		}
		if isTimeout(err) {
			w.Header().Set("Connection", "close")
			return nil, errorf(codeRequestTimeout, "qs: request body not received in time")
		}
		return nil, errorf(codeBadRequest, "qs: read request body: %v", err)
	}
	return buf.Bytes(), nil
}
