package memcache

import (
	"context"
	"errors"
	"unicode/utf8"

	"github.com/quicksilver-kv/qs/internal/store"
)

// ErrServerClosed is returned by Serve once Shutdown was called.
var ErrServerClosed = errors.New("qs: memcache server closed")

// errKind is the label of errors_total.
type errKind uint8

const (
	kindLineTooLong errKind = iota
	kindBadCommand
	kindBadKey
	kindBadDataChunk
	kindTooLarge
	kindTooManyKeys
	kindUnsupported
	kindReplyTooLarge
	kindTimeout
	kindTooManyConns
	kindBackendNotRoot
	kindBackendTooLarge
	kindBackendInvalid
	kindBackendDiskFull
	kindBackendWriteFailed
	kindBackendCorrupt
	kindBackendClosed
	kindBackendCanceled
	kindBackendOther
	kindBackendUnavailable
	kindContended
	kindNonNumeric
	numErrKinds
)

var errKindNames = [numErrKinds]string{
	kindLineTooLong:        "line_too_long",
	kindBadCommand:         "bad_command",
	kindBadKey:             "bad_key",
	kindBadDataChunk:       "bad_data_chunk",
	kindTooLarge:           "too_large",
	kindTooManyKeys:        "too_many_keys",
	kindUnsupported:        "unsupported",
	kindReplyTooLarge:      "reply_too_large",
	kindTimeout:            "timeout",
	kindTooManyConns:       "too_many_conns",
	kindBackendNotRoot:     "backend_not_root",
	kindBackendTooLarge:    "backend_too_large",
	kindBackendInvalid:     "backend_invalid",
	kindBackendDiskFull:    "backend_disk_full",
	kindBackendWriteFailed: "backend_write_failed",
	kindBackendCorrupt:     "backend_corrupt",
	kindBackendClosed:      "backend_closed",
	kindBackendCanceled:    "backend_canceled",
	kindBackendOther:       "backend_other",
	kindBackendUnavailable: "backend_unavailable",
	kindContended:          "contended",
	kindNonNumeric:         "non_numeric",
}

func (k errKind) String() string { return errKindNames[k] }

// backendFailure maps an error returned by the Backend to its metric kind and
// reply line (without terminator). Corruption is tested first: it must win
// over any other error it is joined with.
func backendFailure(err error) (errKind, string) {
	text := errorText(err.Error())
	switch {
	case errors.Is(err, store.ErrCorrupt):
		return kindBackendCorrupt, "SERVER_ERROR integrity check failed: " + text
	case errors.Is(err, store.ErrDiskFull):
		return kindBackendDiskFull, "SERVER_ERROR disk full: " + text
	case errors.Is(err, store.ErrWriteFailed):
		return kindBackendWriteFailed, "SERVER_ERROR " + text
	case errors.Is(err, store.ErrClosed):
		return kindBackendClosed, "SERVER_ERROR " + text
	case errors.Is(err, store.ErrUnavailable):
		return kindBackendUnavailable, "SERVER_ERROR " + text
	case errors.Is(err, store.ErrNotRoot):
		return kindBackendNotRoot, "CLIENT_ERROR writes are accepted only at the root: " + text
	case errors.Is(err, store.ErrTooLarge):
		return kindBackendTooLarge, "CLIENT_ERROR " + text
	case errors.Is(err, store.ErrInvalid):
		return kindBackendInvalid, "CLIENT_ERROR " + text
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return kindBackendCanceled, "SERVER_ERROR " + text
	default:
		return kindBackendOther, "SERVER_ERROR " + text
	}
}

// errorText makes s safe to embed in a reply line: control characters (line
// breaks above all) become spaces, invalid UTF-8 is replaced and the text is
// cut to maxErrorText bytes on a character boundary.
func errorText(s string) string {
	return sanitize(s, ' ', maxErrorText)
}

// sanitize replaces control bytes of s with repl and cuts it to at most limit
// bytes without splitting a UTF-8 character.
func sanitize(s string, repl byte, limit int) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			clean = false
			break
		}
	}
	if clean && len(s) <= limit && utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, min(len(s), limit))
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			r = rune(repl)
		}
		if len(b)+utf8.RuneLen(r) > limit {
			break
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}
