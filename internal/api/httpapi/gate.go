package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// The producer gateway's three steps of a write. A database without a Gate
// admits every write: the producer is nil and every step passes.

// authenticate returns the producer presenting r's bearer token.
func authenticate(d *service.Database, r *http.Request) (*gateway.Producer, error) {
	if d.Gate == nil {
		return nil, nil
	}
	return d.Gate.Authenticate(r.Header.Get("Authorization"))
}

// authorize checks every op's key against the producer's prefixes.
func authorize(d *service.Database, p *gateway.Producer, ops []wal.Op) error {
	if p == nil {
		return nil
	}
	return p.Authorize(d.Name, ops)
}

// admit charges the write to the producer's quotas, waiting a bounded time
// when they are exhausted.
func admit(r *http.Request, p *gateway.Producer, b store.Batch) error {
	if p == nil {
		return nil
	}
	return p.Admit(r.Context(), len(b.Ops), gateway.BatchBytes(b.Ops))
}

// Challenges of 401 answers (RFC 6750 §3).
var (
	challengeMissing = []string{`Bearer realm="qs"`}
	challengeInvalid = []string{`Bearer realm="qs", error="invalid_token"`}
)

// gateDetail adds what the gateway's refusals carry to an error answer:
// the WWW-Authenticate challenge of a 401, the Retry-After of a 429, the
// refused key and allowed prefixes of a 403 forbidden.
func gateDetail(h http.Header, det *errorDetail, code errCode, err error) {
	switch code {
	case codeUnauthenticated:
		h["Www-Authenticate"] = challengeMissing
	case codeInvalidToken:
		h["Www-Authenticate"] = challengeInvalid
	case codeForbidden:
		var fe *gateway.ForbiddenError
		if errors.As(err, &fe) {
			det.Producer = fe.Producer
			if fe.Prefixes != nil {
				k := string(fe.Key)
				det.Key = &k
				det.AllowedPrefixes = fe.Prefixes
			}
		}
	case codeQuotaExceeded:
		var qe *gateway.QuotaError
		if errors.As(err, &qe) {
			s := gateway.RetryAfterSeconds(qe.RetryAfter)
			h["Retry-After"] = []string{strconv.Itoa(s)}
			det.Producer, det.Quota, det.RetryAfterSeconds = qe.Producer, qe.Quota, s
		}
	}
}
