package repl

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// sealed returns n chained entries starting after prev.
func sealed(first uint64, prev wal.Hash, n int) []wal.Entry {
	out := make([]wal.Entry, n)
	for i := range out {
		e := wal.Entry{Index: first + uint64(i), Time: int64(1000 + i), Kind: wal.KindData,
			Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v")}, {Type: wal.OpDelete, Key: []byte("d")}}}
		if i%3 == 2 {
			e.Kind, e.Ops = wal.KindHeartbeat, nil
		}
		e.Seal(prev, nil)
		prev = e.Hash
		out[i] = e
	}
	return out
}

func sampleMessages() []Message {
	return []Message{
		&Hello{Version: 1, Database: "default", DBID: [16]byte{1, 2}, ProcessID: ProcessID{3}, LastIndex: 42, StopIndex: 99, NewestOnly: true},
		&Hello{Version: 1},
		&Welcome{Version: 1, ProcessID: ProcessID{9}, DBID: [16]byte{1}, AppliedIndex: 100, AppliedTime: 12345, LogFirst: 7, NextIndex: 43},
		&Refuse{Code: RefuseWrongDBID, Reason: "database id mismatch: server has x, client expects y"},
		&Entries{Entries: sealed(1, wal.Hash{}, 5)},
		&Progress{AppliedIndex: 5, AppliedTime: -1},
		&Done{LastIndex: 77},
		&Hello{Version: 1, Database: "db", Bootstrap: true, Resume: ResumePoint{Snapshot: SnapshotID{7}, File: 3, Offset: 1 << 33}},
		&Hello{Version: 2, Database: "db", Fetch: true, ProcessID: ProcessID{4}},
		&Fetch{ID: 3, AsOf: 99, Items: []FetchKey{{Key: []byte("a"), Index: 7}, {Key: []byte("bb")}}},
		&Fetch{ID: 4, AsOf: 100, Items: []FetchKey{{Key: []byte("warm"), Index: 8}}, Flags: FetchQuiet},
		&Values{ID: 3, Applied: 120, Horizon: 40, Results: []FetchResult{{Status: FetchOK, Index: 7, Value: []byte("val")}, {Status: FetchAbsent}, {Status: FetchBehind}, {Status: FetchOK, Index: 9, Value: []byte{}}}},
		&Snapshot{ID: SnapshotID{1, 2}, Index: 1000, Time: 99, Hash: wal.Hash{5}, Files: []SnapshotFile{{"MANIFEST-000001", 39}, {"000005.sst", 1 << 30}}},
		&Chunk{File: 1, Offset: 1 << 20, Data: []byte("table bytes")},
		&FileEnd{File: 1, Size: 1 << 30, CRC: 0xdeadbeef},
		&Head{headsig.Head{Index: 42, Hash: wal.Hash{1, 2, 3}, Sig: [headsig.SigSize]byte{9, 8, 7}}},
		&Hello{Version: 2, Database: "db", Prefetch: true, ProcessID: ProcessID{5}},
		&Prefetch{Index: 7, Key: []byte("app/k"), Value: []byte("value")},
		&Prefetch{Index: 1 << 40, Key: []byte("empty"), Value: []byte{}},
		&Root{HTTP: []string{"10.0.0.1:7380", "root-2:7380"}},
		&Root{},
		&Path{Nodes: []uint64{1, 1 << 63, 42}},
		&Path{},
	}
}

func TestRoundTrip(t *testing.T) {
	var stream bytes.Buffer
	msgs := sampleMessages()
	for _, m := range msgs {
		if err := WriteMessage(&stream, m); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range msgs {
		got, err := ReadMessage(&stream)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("message %d: got %+v, want %+v", i, got, want)
		}
	}
	if _, err := ReadMessage(&stream); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

// Every single flipped bit of a frame is detected, by the checksum, the
// length check or the decoder: never a different valid message.
func TestFlippedBitDetected(t *testing.T) {
	for _, m := range sampleMessages() {
		frame, err := AppendFrame(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		for bit := 0; bit < len(frame)*8; bit++ {
			b := bytes.Clone(frame)
			b[bit/8] ^= 1 << (bit % 8)
			got, err := ReadMessage(bytes.NewReader(b))
			if err == nil {
				t.Fatalf("%s: flipped bit %d gave %+v", m.Type(), bit, got)
			}
		}
	}
}

func TestReadFrameErrors(t *testing.T) {
	frame, _ := AppendFrame(nil, &Progress{AppliedIndex: 1})
	if _, err := ReadMessage(bytes.NewReader(frame[:len(frame)-1])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: %v", err)
	}
	bad := bytes.Clone(frame)
	bad[len(bad)-1] ^= 0xff
	if _, err := ReadMessage(bytes.NewReader(bad)); !errors.Is(err, ErrChecksum) {
		t.Errorf("bad crc: %v", err)
	}
	huge := []byte{byte(MsgEntries), 0xff, 0xff, 0xff, 0xff}
	if _, err := ReadMessage(bytes.NewReader(huge)); !errors.Is(err, ErrMalformed) {
		t.Errorf("huge: %v", err)
	}
	unknown, _ := AppendFrame(nil, &Done{})
	unknown[0] = 99
	// Fix the CRC so the type check itself is exercised.
	unknown = unknown[:len(unknown)-4]
	p := unknown[frameHeader:]
	re, _ := AppendFrame(nil, rawMsg{t: 99, p: p})
	if _, err := ReadMessage(bytes.NewReader(re)); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown type: %v", err)
	}
}

type rawMsg struct {
	t MsgType
	p []byte
}

func (r rawMsg) Type() MsgType                   { return r.t }
func (r rawMsg) AppendPayload(dst []byte) []byte { return append(dst, r.p...) }

// FuzzReadMessage feeds arbitrary bytes to the frame reader and the payload
// decoders. Anything that decodes must re-encode to a message that decodes
// the same.
func FuzzReadMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		b, _ := AppendFrame(nil, m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(m Message) {
			b, err := AppendFrame(nil, m)
			if err != nil {
				t.Fatalf("re-encode %s: %v", m.Type(), err)
			}
			again, err := ReadMessage(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("re-decode %s: %v", m.Type(), err)
			}
			if !reflect.DeepEqual(again, m) {
				t.Fatalf("round trip changed %+v into %+v", m, again)
			}
		}
		if m, err := ReadMessage(bytes.NewReader(data)); err == nil {
			check(m)
		}
		// Reach the decoders even when the fuzzer did not fix the CRC.
		if len(data) > frameHeader {
			if m, err := DecodePayload(MsgType(data[0]), data[frameHeader:]); err == nil {
				check(m)
			}
		}
	})
}

// TestWriteSeedCorpus regenerates testdata/fuzz/FuzzReadMessage when
// QS_WRITE_CORPUS=1.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("QS_WRITE_CORPUS") != "1" {
		t.Skip("set QS_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReadMessage")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, m := range sampleMessages() {
		b, _ := AppendFrame(nil, m)
		// The position keeps two samples of one type and length apart.
		name := filepath.Join(dir, "seed-"+strconv.Itoa(i)+"-"+m.Type().String()+"-"+strconv.Itoa(len(b)))
		content := "go test fuzz v1\n[]byte(" + strconv.Quote(string(b)) + ")\n"
		if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMaxFetchValueFitsOneAnswer: a value of MaxFetchValueBytes, alone in
// the answer to a request of MaxFetchKeys keys (every other key skipped),
// fits one frame and decodes; a value of MaxPayload does not.
func TestMaxFetchValueFitsOneAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~400 MB")
	}
	v := &Values{ID: 1, Applied: 1 << 40, Horizon: 1 << 39, Results: make([]FetchResult, MaxFetchKeys)}
	for i := range v.Results {
		v.Results[i].Status = FetchSkipped
	}
	big := make([]byte, MaxFetchValueBytes)
	v.Results[0] = FetchResult{Status: FetchOK, Index: 1 << 40, Value: big}
	frame, err := AppendFrame(nil, v)
	if err != nil {
		t.Fatalf("a value of MaxFetchValueBytes does not fit an answer: %v", err)
	}
	typ, p, err := ReadFrame(bytes.NewReader(frame))
	if err != nil || typ != MsgValues {
		t.Fatalf("read back: %v %v", typ, err)
	}
	got, err := decodeValues(p)
	if err != nil || len(got.Results[0].Value) != MaxFetchValueBytes {
		t.Fatalf("decode: %v", err)
	}
	frame = nil
	v.Results[0].Value = make([]byte, MaxPayload)
	if _, err := AppendFrame(nil, v); err == nil {
		t.Fatal("a value of MaxPayload fit an answer: the limit is not where the protocol puts it")
	}
}
