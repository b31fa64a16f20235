package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/keyuse"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
)

// Bounds of GET /v1/{db}/usage?unread=true.
const (
	defaultUnreadWindow = 24 * time.Hour
	defaultUnreadLimit  = 100
	maxUnreadLimit      = 10000
)

// unread serves GET /v1/{db}/usage?unread=true[&window=D][&limit=N][&producer=P]:
// per producer and prefix, the keys with no sampled read within the
// window (default 24h, at most keyuse.Retention), listing at most limit
// keys per prefix (default 100, at most 10000).
func (h *handler) unread(w http.ResponseWriter, r *http.Request, d *service.Database, q url.Values) int {
	if v := q.Get("unread"); v != "true" {
		return h.fail(w, r, d, errorf(codeBadRequest, "qs: unread=%q: window and limit go with unread=true", v))
	}
	window := defaultUnreadWindow
	if v, ok := q["window"]; ok {
		t, err := time.ParseDuration(v[0])
		if err != nil || t <= 0 || t > keyuse.Retention {
			return h.fail(w, r, d, errorf(codeBadRequest, "qs: window %q is not a duration in (0, %v], such as 1h or 24h", v[0], keyuse.Retention))
		}
		window = t
	}
	limit := defaultUnreadLimit
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 0 || n > maxUnreadLimit {
			return h.fail(w, r, d, errorf(codeBadRequest, "qs: limit %q is not a number in 0..%d", v[0], maxUnreadLimit))
		}
		limit = n
	}
	if d.KeyUse == nil {
		return h.fail(w, r, d, errorf(codeBadRequest, "%v%s (database %s is a replica here)", gateway.ErrNoKeyUse, rootHint(d), d.Name))
	}
	now := time.Now()
	since := now.Add(-window)
	if s := d.KeyUse.Since(); s.After(since) {
		since = s
	}
	win := d.KeyUse
	rep, err := d.Gate.Unread(d.Store, d.Name, q.Get("producer"), func(key []byte) bool {
		return win.ReadSince(keyuse.Hash(key), since)
	}, limit)
	if err != nil {
		return h.fail(w, r, d, err)
	}
	rep.Since = since.UTC().Format(time.RFC3339)
	rep.WindowSeconds = now.Sub(since).Seconds()
	rep.SampleRate = d.Reads.Rate()
	return h.answerJSON(w, rep, rep.Index)
}

// rootHint is " at http://ROOT" when d is a replica that knows the HTTP
// address of its root (its CanWrite refusal names it), else "".
func rootHint(d *service.Database) string {
	var nr *store.NotRootError
	if err := d.CanWrite(); !errors.As(err, &nr) || len(nr.Root) == 0 {
		return ""
	}
	return " at http://" + strings.Join(nr.Root, " or http://")
}
