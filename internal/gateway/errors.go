package gateway

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors of the gateway. The API edge maps them to stable codes with
// errors.Is (httpapi: unauthenticated 401, invalid_token 401, forbidden
// 403, quota_exceeded 429); every refusal is counted in
// qs_gateway_rejections_total.
var (
	// ErrUnauthenticated: a write without an "Authorization: Bearer" token.
	ErrUnauthenticated = errors.New("qs: writes need a producer token (Authorization: Bearer <token>)")
	// ErrInvalidToken: the token is not one of the producers file.
	ErrInvalidToken = errors.New("qs: unknown producer token")
	// ErrForbidden: the producer may not write a key (or the database).
	// The error is a *ForbiddenError.
	ErrForbidden = errors.New("qs: forbidden")
	// ErrQuota: the write is beyond the producer's quota for longer than
	// max_wait. The error is a *QuotaError.
	ErrQuota = errors.New("qs: producer quota exceeded")
	// ErrOverBurst: one write is larger than the producer's bucket (ops_burst
	// or bytes_burst) and can never be admitted. Wrapped with
	// store.ErrTooLarge by Admit.
	ErrOverBurst = errors.New("qs: write larger than the producer's burst")
	// ErrMemcacheWrite: memcached writes carry no credentials, so they are
	// refused while producers are configured.
	ErrMemcacheWrite = errors.New("qs: memcached writes are refused while producers are configured; write over HTTP with a bearer token")
	// ErrUnknownProducer: a usage request named no producer of the
	// database.
	ErrUnknownProducer = errors.New("qs: no such producer for this database")
)

// ForbiddenError says which key a producer may not write. It matches
// ErrForbidden with errors.Is.
type ForbiddenError struct {
	Producer string
	DB       string
	// Op is the position of the refused operation in its batch (0 for a
	// single PUT or DELETE).
	Op  int
	Key []byte
	// Prefixes are the producer's prefixes; nil when it may not write DB
	// at all.
	Prefixes []string
}

func (e *ForbiddenError) Error() string {
	if e.Prefixes == nil {
		return fmt.Sprintf("qs: producer %q may not write database %q", e.Producer, e.DB)
	}
	return fmt.Sprintf("qs: producer %q may not write key %q (op %d): allowed prefixes are %s",
		e.Producer, e.Key, e.Op, quoteList(e.Prefixes))
}

func (e *ForbiddenError) Is(target error) bool { return target == ErrForbidden }

// QuotaError says which quota refused a write and when to retry. It
// matches ErrQuota with errors.Is.
type QuotaError struct {
	Producer string
	// Quota is "ops" or "bytes".
	Quota string
	// RetryAfter is when the same write would be admitted (slowed at most
	// max_wait) if the producer sent nothing else meanwhile.
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("qs: producer %q is over its %s quota; retry in %v", e.Producer, e.Quota, e.RetryAfter.Round(time.Millisecond))
}

func (e *QuotaError) Is(target error) bool { return target == ErrQuota }

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
