// Package checker verifies recorded reads against a replay of a
// database's log: each read must equal the state of the database at the
// index it was answered at (all keys of a multi-key read at that one
// index), and the indexes one client sees must never go back. It is pure
// logic, used by the consistency tests of replicas and proxies.
package checker

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// Model is every key's history, rebuilt from log entries applied in
// order.
type Model struct {
	last    uint64
	changes map[string][]change
}

type change struct {
	index uint64
	value []byte
	found bool
}

// NewModel returns the model of an empty database.
func NewModel() *Model { return &Model{changes: map[string][]change{}} }

// Apply adds the next entry; entries must come in index order without
// gaps.
func (m *Model) Apply(e wal.Entry) error {
	if e.Index != m.last+1 {
		return fmt.Errorf("checker: entry %d after %d", e.Index, m.last)
	}
	m.last = e.Index
	for _, op := range e.Ops {
		ch := m.changes[string(op.Key)]
		c := change{index: e.Index, found: op.Type == wal.OpSet, value: bytes.Clone(op.Value)}
		if n := len(ch); n > 0 && ch[n-1].index == e.Index {
			ch[n-1] = c // later ops of an entry win
		} else {
			ch = append(ch, c)
		}
		m.changes[string(op.Key)] = ch
	}
	return nil
}

// Last is the index of the last entry applied.
func (m *Model) Last() uint64 { return m.last }

// At returns the value of key at index i.
func (m *Model) At(key string, i uint64) ([]byte, bool) {
	ch := m.changes[key]
	n := sort.Search(len(ch), func(j int) bool { return ch[j].index > i })
	if n == 0 || !ch[n-1].found {
		return nil, false
	}
	return ch[n-1].value, true
}

// Read is one recorded read: what a client got for some keys, answered at
// one index.
type Read struct {
	Client int
	At     uint64
	Keys   []string
	Found  []bool
	Values [][]byte
	// Exact: the keys are all the keys that existed in a range at At (a
	// scan), so a key of the range missing from Keys is a violation too.
	// Range is [From, To) ("" To: no end).
	Exact    bool
	From, To string
}

// Violation is one broken guarantee.
type Violation struct {
	Kind   string // value, backwards, future, scan
	Client int
	At     uint64
	Key    string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: client %d at %d key %q: %s", v.Kind, v.Client, v.At, v.Key, v.Detail)
}

// Report is the outcome of Check.
type Report struct {
	Reads, Keys int
	Violations  []Violation // the first 20
	Count       int         // all violations
}

func (r *Report) add(v Violation) {
	r.Count++
	if len(r.Violations) < 20 {
		r.Violations = append(r.Violations, v)
	}
}

// Check verifies reads, which must be in each client's issue order.
func Check(m *Model, reads []Read) Report {
	var r Report
	last := map[int]uint64{}
	for _, rd := range reads {
		r.Reads++
		if prev, ok := last[rd.Client]; ok && rd.At < prev {
			r.add(Violation{Kind: "backwards", Client: rd.Client, At: rd.At, Detail: fmt.Sprintf("index went back from %d", prev)})
		}
		last[rd.Client] = max(last[rd.Client], rd.At)
		if rd.At > m.last {
			r.add(Violation{Kind: "future", Client: rd.Client, At: rd.At, Detail: fmt.Sprintf("beyond the log's last index %d", m.last)})
			continue
		}
		for i, k := range rd.Keys {
			r.Keys++
			want, wf := m.At(k, rd.At)
			if wf != rd.Found[i] || !bytes.Equal(want, rd.Values[i]) {
				r.add(Violation{Kind: "value", Client: rd.Client, At: rd.At, Key: k,
					Detail: fmt.Sprintf("got found=%v %d bytes, the log has found=%v %d bytes", rd.Found[i], len(rd.Values[i]), wf, len(want))})
			}
		}
		if rd.Exact {
			got := map[string]bool{}
			for _, k := range rd.Keys {
				got[k] = true
			}
			for k := range m.changes {
				if k < rd.From || (rd.To != "" && k >= rd.To) || got[k] {
					continue
				}
				if _, ok := m.At(k, rd.At); ok {
					r.add(Violation{Kind: "scan", Client: rd.Client, At: rd.At, Key: k, Detail: "key existed but the scan did not return it"})
				}
			}
		}
	}
	return r
}
