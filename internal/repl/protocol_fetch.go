package repl

import (
	"encoding/binary"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// The fetch protocol (version 2): a proxy asks a full node for values as
// of an index, on a connection opened with a Hello carrying the Fetch
// flag. After the Welcome the client sends Fetch messages, as many as it
// likes without waiting (pipelining); the server answers each with one
// Values message, in order, carrying the request's id. See docs/protocol.md.

// MaxFetchKeys bounds the keys of one Fetch.
const MaxFetchKeys = 10000

// QuietVersion is the first version whose fetch connections carry Fetch
// flags (FetchQuiet). A client sends flags only on a connection whose
// Welcome is of this version or later: a server of an older version
// refuses the Hello with code "version", and the client then speaks
// FetchVersion to it, without flags (DialFetch).
const QuietVersion uint16 = 6

// FetchFlags are the options of one Fetch. Bits not defined here are
// refused.
type FetchFlags uint8

const (
	// FetchQuiet: answer as any Fetch, but a relay does not publish the
	// values on its prefetch stream (nobody read them: a shard warm-up's
	// fetch).
	FetchQuiet FetchFlags = 1 << 0

	knownFetchFlags = FetchQuiet
)

// maxValuesBytes is the value bytes after which a server answers the
// remaining keys of a Fetch with FetchSkipped, so an answer stays well
// under MaxPayload.
const maxValuesBytes = 64 << 20

// MaxFetchValueBytes is the largest value a fetch answer can carry: a
// value is sent alone in its answer when it is larger than the others
// leave room for, so one value must fit one payload with the answer's
// header and a status byte for every other key of the request (about 10
// KB at MaxFetchKeys). A proxy cannot fetch a larger value (it can still
// hold one written inside its window).
const MaxFetchValueBytes = MaxPayload - 64<<10

// FetchKey is one key of a Fetch: the version the client expects (the
// index of the write that set it), or 0 for whatever version is current
// at the request's AsOf.
type FetchKey struct {
	Key   []byte
	Index uint64
}

// Fetch asks for the values of keys as of one index.
//
//	payload := id(8 BE) asof(8 BE) count(uvarint 1..MaxFetchKeys) item* [flags(1)]
//	item    := index(8 BE) keylen(uvarint 1..wal.MaxKeyLen) key
//
// asof 0 means the server's applied index. flags (QuietVersion) is
// present only when not zero, so a Fetch without flags is the message of
// FetchVersion byte for byte and decodes without knowing the
// connection's version.
type Fetch struct {
	ID    uint64
	AsOf  uint64
	Items []FetchKey
	Flags FetchFlags
}

// FetchStatus is the outcome of one key of a Fetch. Codes are stable.
type FetchStatus uint8

const (
	// FetchOK: the value follows, with the index of the write that set it.
	FetchOK FetchStatus = 0
	// FetchAbsent: the key did not exist at asof (only for index 0).
	FetchAbsent FetchStatus = 1
	// FetchBehind: the server has not applied the version asked (or asof,
	// for index 0): ask another server, or later.
	FetchBehind FetchStatus = 2
	// FetchGone: asof is below the server's history horizon.
	FetchGone FetchStatus = 3
	// FetchMismatch: the version current at asof is not the one asked.
	FetchMismatch FetchStatus = 4
	// FetchError: the server could not read the value (integrity error),
	// or cannot send it (larger than MaxFetchValueBytes).
	FetchError FetchStatus = 5
	// FetchSkipped: the answer was full; ask again.
	FetchSkipped FetchStatus = 6
)

var fetchStatusNames = [...]string{"ok", "absent", "behind", "gone", "mismatch", "error", "skipped"}

func (s FetchStatus) String() string {
	if int(s) < len(fetchStatusNames) {
		return fetchStatusNames[s]
	}
	return fmt.Sprintf("status_%d", uint8(s))
}

// FetchResult is the answer for one key.
type FetchResult struct {
	Status FetchStatus
	Index  uint64 // FetchOK: the version's index
	Value  []byte // FetchOK only
}

// Values answers one Fetch, key by key in the same order.
//
//	payload := id(8 BE) applied(8 BE) horizon(8 BE) count(uvarint) result*
//	result  := status(1) [index(8 BE) vallen(uvarint) value]   (index… for FetchOK only)
//
// applied and horizon are the server's applied index and history horizon
// when it answered, so a client knows which versions it can ask next.
type Values struct {
	ID      uint64
	Applied uint64
	Horizon uint64
	Results []FetchResult
}

func (*Fetch) Type() MsgType  { return MsgFetch }
func (*Values) Type() MsgType { return MsgValues }

func (m *Fetch) AppendPayload(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, m.ID)
	dst = binary.BigEndian.AppendUint64(dst, m.AsOf)
	dst = binary.AppendUvarint(dst, uint64(len(m.Items)))
	for _, it := range m.Items {
		dst = binary.BigEndian.AppendUint64(dst, it.Index)
		dst = binary.AppendUvarint(dst, uint64(len(it.Key)))
		dst = append(dst, it.Key...)
	}
	if m.Flags != 0 {
		dst = append(dst, byte(m.Flags))
	}
	return dst
}

// decodeFetch decodes a Fetch; keys alias p.
func decodeFetch(p []byte) (*Fetch, error) {
	if len(p) < 17 {
		return nil, fmt.Errorf("%w: fetch of %d bytes", ErrMalformed, len(p))
	}
	m := &Fetch{ID: binary.BigEndian.Uint64(p), AsOf: binary.BigEndian.Uint64(p[8:])}
	count, n := binary.Uvarint(p[16:])
	if n <= 0 || count == 0 || count > MaxFetchKeys {
		return nil, fmt.Errorf("%w: fetch key count out of 1..%d", ErrMalformed, MaxFetchKeys)
	}
	p = p[16+n:]
	if count > uint64(len(p)/10) {
		return nil, fmt.Errorf("%w: %d keys in %d bytes", ErrMalformed, count, len(p))
	}
	m.Items = make([]FetchKey, 0, count)
	for i := uint64(0); i < count; i++ {
		if len(p) < 9 {
			return nil, fmt.Errorf("%w: fetch item %d truncated", ErrMalformed, i)
		}
		idx := binary.BigEndian.Uint64(p)
		l, n := binary.Uvarint(p[8:])
		if n <= 0 || l == 0 || l > wal.MaxKeyLen || l > uint64(len(p)-8-n) {
			return nil, fmt.Errorf("%w: fetch item %d: bad key length", ErrMalformed, i)
		}
		key := p[8+n : 8+n+int(l)]
		m.Items = append(m.Items, FetchKey{Key: key[:len(key):len(key)], Index: idx})
		p = p[8+n+int(l):]
	}
	if len(p) == 1 {
		f := FetchFlags(p[0])
		if f == 0 || f&^knownFetchFlags != 0 {
			return nil, fmt.Errorf("%w: fetch flags %#x (known: %#x; sent only when not zero)", ErrMalformed, p[0], knownFetchFlags)
		}
		m.Flags, p = f, p[1:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last fetch item", ErrMalformed, len(p))
	}
	return m, nil
}

func (m *Values) AppendPayload(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, m.ID)
	dst = binary.BigEndian.AppendUint64(dst, m.Applied)
	dst = binary.BigEndian.AppendUint64(dst, m.Horizon)
	dst = binary.AppendUvarint(dst, uint64(len(m.Results)))
	for _, r := range m.Results {
		dst = append(dst, byte(r.Status))
		if r.Status == FetchOK {
			dst = binary.BigEndian.AppendUint64(dst, r.Index)
			dst = binary.AppendUvarint(dst, uint64(len(r.Value)))
			dst = append(dst, r.Value...)
		}
	}
	return dst
}

// decodeValues decodes a Values; values alias p.
func decodeValues(p []byte) (*Values, error) {
	if len(p) < 25 {
		return nil, fmt.Errorf("%w: values of %d bytes", ErrMalformed, len(p))
	}
	m := &Values{ID: binary.BigEndian.Uint64(p), Applied: binary.BigEndian.Uint64(p[8:]), Horizon: binary.BigEndian.Uint64(p[16:])}
	count, n := binary.Uvarint(p[24:])
	if n <= 0 || count > MaxFetchKeys || count > uint64(len(p)) {
		return nil, fmt.Errorf("%w: values result count", ErrMalformed)
	}
	p = p[24+n:]
	m.Results = make([]FetchResult, 0, count)
	for i := uint64(0); i < count; i++ {
		if len(p) < 1 {
			return nil, fmt.Errorf("%w: values result %d truncated", ErrMalformed, i)
		}
		r := FetchResult{Status: FetchStatus(p[0])}
		p = p[1:]
		switch {
		case r.Status > FetchSkipped:
			return nil, fmt.Errorf("%w: values result %d: unknown status %d", ErrMalformed, i, r.Status)
		case r.Status == FetchOK:
			if len(p) < 9 {
				return nil, fmt.Errorf("%w: values result %d truncated", ErrMalformed, i)
			}
			r.Index = binary.BigEndian.Uint64(p)
			l, n := binary.Uvarint(p[8:])
			if n <= 0 || l > wal.MaxValueLen || l > uint64(len(p)-8-n) {
				return nil, fmt.Errorf("%w: values result %d: bad value length", ErrMalformed, i)
			}
			v := p[8+n : 8+n+int(l)]
			r.Value = v[:len(v):len(v)]
			p = p[8+n+int(l):]
		}
		m.Results = append(m.Results, r)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last result", ErrMalformed, len(p))
	}
	return m, nil
}
