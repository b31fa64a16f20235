package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/store"
)

// errCode is a stable error code of the API, sent in error bodies and used
// as the kind label of errors_total. docs/protocol.md ("Errors") lists
// them; keep it in step.
type errCode uint8

const (
	codeBadRequest errCode = iota
	codeBadJSON
	codeNotRoot
	codeNotFound
	codeUnknownDatabase
	codeMethodNotAllowed
	codeConditionFailed
	codeTooLarge
	codeCanceled
	codeIntegrity
	codeWriteFailed
	codeInternal
	codeUnavailable
	codeTimeout
	codeDiskFull
	codeUnauthenticated
	codeInvalidToken
	codeForbidden
	codeQuotaExceeded
	codeRequestTimeout
	numCodes
)

// statusClientClosed is nginx's "client closed request": the client went
// away before the answer was ready. Nobody reads it; it keeps such requests
// apart from real failures in metrics and logs.
const statusClientClosed = 499

var codeInfo = [numCodes]struct {
	name   string
	status int
}{
	codeBadRequest:       {"bad_request", http.StatusBadRequest},
	codeBadJSON:          {"bad_json", http.StatusBadRequest},
	codeNotRoot:          {"not_root", http.StatusForbidden},
	codeNotFound:         {"not_found", http.StatusNotFound},
	codeUnknownDatabase:  {"unknown_database", http.StatusNotFound},
	codeMethodNotAllowed: {"method_not_allowed", http.StatusMethodNotAllowed},
	codeConditionFailed:  {"condition_failed", http.StatusConflict},
	codeTooLarge:         {"too_large", http.StatusRequestEntityTooLarge},
	codeCanceled:         {"canceled", statusClientClosed},
	codeIntegrity:        {"integrity", http.StatusInternalServerError},
	codeWriteFailed:      {"write_failed", http.StatusInternalServerError},
	codeInternal:         {"internal", http.StatusInternalServerError},
	codeUnavailable:      {"unavailable", http.StatusServiceUnavailable},
	codeTimeout:          {"timeout", http.StatusGatewayTimeout},
	codeDiskFull:         {"disk_full", http.StatusInsufficientStorage},
	codeUnauthenticated:  {"unauthenticated", http.StatusUnauthorized},
	codeInvalidToken:     {"invalid_token", http.StatusUnauthorized},
	codeForbidden:        {"forbidden", http.StatusForbidden},
	codeQuotaExceeded:    {"quota_exceeded", http.StatusTooManyRequests},
	codeRequestTimeout:   {"request_timeout", http.StatusRequestTimeout},
}

func (c errCode) String() string { return codeInfo[c].name }

// status is the HTTP status answered with the code.
func (c errCode) status() int { return codeInfo[c].status }

// apiError is an error the API found itself (bad parameters, bad JSON, ...)
// and already knows the code of.
type apiError struct {
	code errCode
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errorf(code errCode, format string, args ...any) error {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// classify maps an error to its API code: the API's own errors, then the
// store's sentinels, then transport and context errors. Anything else is
// internal.
func classify(err error) errCode {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return codeTooLarge
	}
	for _, m := range sentinelCodes {
		if errors.Is(err, m.err) {
			return m.code
		}
	}
	return codeInternal
}

// sentinelCodes maps store sentinels (and context errors) to codes, in the
// order they are tried. ErrCorrupt comes first: an integrity failure is
// reported as such whatever else wraps it.
var sentinelCodes = []struct {
	err  error
	code errCode
}{
	{store.ErrCorrupt, codeIntegrity},
	{store.ErrNotRoot, codeNotRoot},
	{store.ErrConditionFailed, codeConditionFailed},
	{store.ErrTooLarge, codeTooLarge},
	{store.ErrInvalid, codeBadRequest},
	{store.ErrDiskFull, codeDiskFull},
	{store.ErrWriteFailed, codeWriteFailed},
	{store.ErrClosed, codeUnavailable},
	{store.ErrUnavailable, codeUnavailable},
	{gateway.ErrUnauthenticated, codeUnauthenticated},
	{gateway.ErrInvalidToken, codeInvalidToken},
	{gateway.ErrForbidden, codeForbidden},
	{gateway.ErrQuota, codeQuotaExceeded},
	{gateway.ErrUnknownProducer, codeNotFound},
	{context.DeadlineExceeded, codeTimeout},
	{context.Canceled, codeCanceled},
}

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// AppliedIndex is set on timeouts of min_index waits.
	AppliedIndex *uint64 `json:"applied_index,omitempty"`
	// RootHTTP, on not_root, are the HTTP addresses where the writes are
	// accepted, when the node knows them.
	RootHTTP []string `json:"root_http,omitempty"`
	// The gateway's refusals (gate.go): the producer; for forbidden, the
	// first key refused and the producer's prefixes; for quota_exceeded,
	// the quota ("ops" or "bytes") and the Retry-After delay.
	Producer          string   `json:"producer,omitempty"`
	Key               *string  `json:"key,omitempty"`
	AllowedPrefixes   []string `json:"allowed_prefixes,omitempty"`
	Quota             string   `json:"quota,omitempty"`
	RetryAfterSeconds int      `json:"retry_after_seconds,omitempty"`
}

// Bodies of frequent errors, encoded once.
var (
	notFoundKeyBody = mustErrorBody(codeNotFound, "key not found")
	encodeErrorBody = mustErrorBody(codeInternal, "cannot encode the error")
)

func mustErrorBody(code errCode, msg string) []byte {
	b, err := json.Marshal(errorBody{Error: errorDetail{Code: code.String(), Message: msg}})
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// writeErrorBody sends a prepared JSON error body with the code's status
// and counts it.
func (m *Metrics) writeErrorBody(w http.ResponseWriter, code errCode, body []byte) int {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h.Del("Content-Length")
	w.WriteHeader(code.status())
	w.Write(body)
	m.errorsByCode[code].Inc()
	return code.status()
}

// writeError answers with the JSON error for err and returns the status.
// applied, when not nil, is added to the body as applied_index. The error
// is counted in m.
func (m *Metrics) writeError(w http.ResponseWriter, code errCode, err error, applied *uint64) int {
	det := errorDetail{Code: code.String(), Message: err.Error(), AppliedIndex: applied}
	if nr := (*store.NotRootError)(nil); code == codeNotRoot && errors.As(err, &nr) {
		det.RootHTTP = nr.Root
	}
	gateDetail(w.Header(), &det, code, err)
	body, merr := json.Marshal(errorBody{Error: det})
	if merr != nil { // cannot happen for these types; keep the answer JSON anyway
		return m.writeErrorBody(w, codeInternal, encodeErrorBody)
	}
	return m.writeErrorBody(w, code, append(body, '\n'))
}
