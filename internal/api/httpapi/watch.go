package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// Codes of the watch endpoint. They share the error body and the
// errors_total{kind} metric with the codes of errors.go.
const (
	watchCodeReread          = "reread"
	watchCodeTooManyWatchers = "too_many_watchers"
	// Codes of the error line that ends a stream already under way.
	watchCodeSlow        = "too_slow"
	watchCodeUnavailable = "unavailable"
	watchCodeInternal    = "internal"
)

// watchKeepBufferBytes is the largest line buffer a watch stream keeps
// between writes; a larger one (a big coalesced write) is dropped.
const watchKeepBufferBytes = 64 << 10

var (
	ndjsonContentType = []string{"application/x-ndjson"}
	noCacheValue      = []string{"no-cache"}
)

// watchRoute serves GET /v1/{db}/watch. It is not wrapped by route: a
// stream's duration is not a request latency.
func (h *handler) watchRoute(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("db")
	var status int
	if d, ok := h.cat.Database(name); ok {
		status = h.call(h.watch, w, r, d, routeOther)
	} else {
		status = h.m.writeError(w, codeUnknownDatabase, fmt.Errorf("qs: unknown database %q", name), nil)
		name = ""
	}
	h.m.requests.WithLabelValues(name, "watch", statusLabel(status)).Inc()
}

// watch serves GET /v1/{db}/watch?prefix=P&from_index=N: the changes under
// P after index N as newline-delimited JSON, with progress lines while
// idle, until the client goes away or the hub stops.
func (h *handler) watch(w http.ResponseWriter, r *http.Request, d *service.Database) int {
	var prefix string
	from := d.Store.AppliedIndex()
	if r.URL.RawQuery != "" {
		q, err := parseQuery(r.URL.RawQuery, "prefix", "from_index")
		if err != nil {
			return h.fail(w, r, d, err)
		}
		prefix = q.Get("prefix")
		if v, ok := q["from_index"]; ok {
			n, err := strconv.ParseUint(v[0], 10, 64)
			if err != nil {
				return h.fail(w, r, d, errorf(codeBadRequest, "qs: from_index %q is not an index", v[0]))
			}
			// Beyond the applied index the node would report progress
			// at an index it never reached.
			if applied := d.Store.AppliedIndex(); n > applied {
				return h.fail(w, r, d, errorf(codeBadRequest,
					"qs: from_index %d is beyond the index this node has applied, %d: watch from an index it has reached (a replica behind its root catches up; retry)", n, applied))
			}
			from = n
		}
	}
	if d.Watch == nil {
		return h.m.writeError(w, codeUnavailable, errors.New("qs: watch is not served for this database on this node"), nil)
	}
	sub, err := d.Watch.Subscribe([]byte(prefix), from)
	switch {
	case errors.Is(err, store.ErrLogTruncated):
		return h.m.writeWatchError(w, http.StatusGone, watchCodeReread, err)
	case errors.Is(err, watch.ErrTooManyWatchers):
		return h.m.writeWatchError(w, http.StatusServiceUnavailable, watchCodeTooManyWatchers, err)
	case errors.Is(err, watch.ErrClosed):
		return h.m.writeError(w, codeUnavailable, err, nil)
	case err != nil:
		return h.fail(w, r, d, err)
	}
	defer sub.Close()

	cfg := d.Watch.Config()
	hdr := w.Header()
	hdr["Content-Type"] = ndjsonContentType
	hdr["Cache-Control"] = noCacheValue
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// The headers go out now: the client learns at once that the watch is
	// accepted, even when its first line waits for a write turn.
	if err := rc.Flush(); err != nil {
		return http.StatusOK
	}
	ctx := r.Context()
	var (
		buf      []byte
		deadline time.Time
	)
	wait := time.Duration(0) // the first line comes at once: where the stream starts
	for {
		// Next waits for the hub's write budget and returns everything
		// pending: one write per call.
		u, err := sub.Next(ctx, wait)
		wait = cfg.ProgressWait()
		if err != nil && ctx.Err() != nil {
			return http.StatusOK // the client went away
		}
		var out []byte
		out, buf = streamBytes(buf, u, err, sub.LastIndex(), h.m)
		// Refresh the write deadline when half of it is used: a client
		// that reads nothing for WriteTimeout/2 to WriteTimeout is
		// disconnected. Best effort: not every writer supports it.
		now := time.Now()
		if deadline.Sub(now) < cfg.WriteTimeout/2 {
			deadline = now.Add(cfg.WriteTimeout)
			rc.SetWriteDeadline(deadline)
		}
		if _, werr := w.Write(out); werr != nil {
			return http.StatusOK
		}
		if ferr := rc.Flush(); ferr != nil {
			return http.StatusOK
		}
		if err != nil {
			return http.StatusOK
		}
		sub.Delivered(u, time.Now())
	}
}

// streamBytes returns the bytes of one write of a watch stream: the
// update's changes, a progress line, or the error line that ends the
// stream (err non-nil; last is the index the stream is complete through),
// counted in m.
// A single batch is written from its encoding, shared with every watcher
// of the prefix; anything else is built in buf. keep is the buffer to
// pass next time: never a shared encoding, never one grown past
// watchKeepBufferBytes.
func streamBytes(buf []byte, u watch.Update, err error, last uint64, m *Metrics) (out, keep []byte) {
	switch {
	case err != nil:
		out = appendStreamError(buf[:0], err, last, m)
	case len(u.Batches) == 0:
		out = appendProgress(buf[:0], u)
	case len(u.Batches) == 1:
		return u.Batches[0].Encoded(appendEvents), buf
	default:
		out = buf[:0]
		for _, b := range u.Batches {
			out = append(out, b.Encoded(appendEvents)...)
		}
	}
	if cap(out) > watchKeepBufferBytes {
		return out, buf
	}
	return out, out
}

// writeWatchError answers with a JSON error of a watch-only code.
func (m *Metrics) writeWatchError(w http.ResponseWriter, status int, code string, err error) int {
	body, merr := json.Marshal(errorBody{Error: errorDetail{Code: code, Message: err.Error()}})
	if merr != nil {
		return m.writeErrorBody(w, codeInternal, encodeErrorBody)
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
	m.errors.WithLabelValues(code).Inc()
	return status
}

// streamErrorLine is the last line of a stream the server ends:
// {"error": {"code": ..., "message": ..., "index": N}}, N being the index
// the stream was complete through, to resume from (absent for reread).
type streamErrorLine struct {
	Error struct {
		Code    string  `json:"code"`
		Message string  `json:"message"`
		Index   *uint64 `json:"index,omitempty"`
	} `json:"error"`
}

func appendStreamError(dst []byte, err error, last uint64, m *Metrics) []byte {
	var l streamErrorLine
	l.Error.Message = err.Error()
	l.Error.Index = &last
	switch {
	case errors.Is(err, store.ErrLogTruncated):
		l.Error.Code = watchCodeReread
		l.Error.Index = nil
	case errors.Is(err, watch.ErrSlow):
		l.Error.Code = watchCodeSlow
		l.Error.Message = fmt.Sprintf("%s: reconnect with from_index=%d", err, last)
	case errors.Is(err, watch.ErrClosed):
		l.Error.Code = watchCodeUnavailable
		l.Error.Message = fmt.Sprintf("%s: reconnect with from_index=%d", err, last)
	default:
		l.Error.Code = watchCodeInternal
	}
	b, merr := json.Marshal(l)
	if merr != nil {
		return append(dst, `{"error":{"code":"internal","message":"cannot encode the error"}}`+"\n"...)
	}
	m.errors.WithLabelValues(l.Error.Code).Inc()
	return append(append(dst, b...), '\n')
}

// appendProgress appends {"progress":true,"index":N,"time":"..."}; time is
// left out when unknown.
func appendProgress(dst []byte, u watch.Update) []byte {
	dst = append(dst, `{"progress":true,"index":`...)
	dst = strconv.AppendUint(dst, u.Index, 10)
	if !u.Time.IsZero() {
		dst = append(dst, `,"time":"`...)
		dst = u.Time.UTC().AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	return append(dst, "}\n"...)
}

// appendEvents appends one line per change:
// {"index":I,"key":"k","value":"<base64>"} or {"index":I,"key":"k","deleted":true}.
func appendEvents(dst []byte, evs []watch.Event) []byte {
	for i := range evs {
		e := &evs[i]
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendUint(dst, e.Index, 10)
		dst = append(dst, `,"key":`...)
		dst = appendKey(dst, e.Key)
		if e.Deleted {
			dst = append(dst, `,"deleted":true}`+"\n"...)
			continue
		}
		dst = append(dst, `,"value":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, e.Value)
		dst = append(dst, "\"}\n"...)
	}
	return dst
}

// appendKey appends key as a JSON string: plain ASCII directly, anything
// else through appendJSONString (invalid UTF-8 becomes U+FFFD).
func appendKey(dst, key []byte) []byte {
	for _, c := range key {
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return appendJSONString(dst, key)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, key...)
	return append(dst, '"')
}
