package tests

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"
)

// mcRaw is a raw connection to a memcached door, for the binary and meta
// protocols that gomemcache does not speak.
type mcRaw struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialMC(t *testing.T, addr string) *mcRaw {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(60 * time.Second))
	return &mcRaw{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// binary sends one binary request and returns the status and value of
// its reply.
func (c *mcRaw) binary(op byte, key, extras, value string) (uint16, string) {
	c.t.Helper()
	b := []byte{0x80, op}
	b = binary.BigEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, byte(len(extras)), 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(extras)+len(key)+len(value)))
	b = binary.BigEndian.AppendUint32(b, 0xfeed)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = append(b, extras+key+value...)
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
	hdr := make([]byte, 24)
	if _, err := io.ReadFull(c.r, hdr); err != nil {
		c.t.Fatal(err)
	}
	if hdr[0] != 0x81 || hdr[1] != op || binary.BigEndian.Uint32(hdr[12:]) != 0xfeed {
		c.t.Fatalf("binary reply header %x", hdr)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[8:]))
	if _, err := io.ReadFull(c.r, body); err != nil {
		c.t.Fatal(err)
	}
	skip := int(hdr[4]) + int(binary.BigEndian.Uint16(hdr[2:]))
	return binary.BigEndian.Uint16(hdr[6:]), string(body[skip:])
}

// line sends a text or meta request and returns its first reply line.
func (c *mcRaw) line(req string) string {
	c.t.Helper()
	if _, err := c.nc.Write([]byte(req)); err != nil {
		c.t.Fatal(err)
	}
	l, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.TrimSuffix(l, "\r\n")
}

const binSetExtras = "\x00\x00\x00\x00\x00\x00\x00\x00"

// checkMemcacheWrites runs every write command of every protocol through
// addr, a node that accepts writes, and checks the outcomes.
func checkMemcacheWrites(t *testing.T, addr, prefix string) {
	t.Helper()
	mc := gomemcache.New(addr)
	mc.Timeout = 30 * time.Second
	k := func(s string) string { return prefix + s }
	if err := mc.Set(&gomemcache.Item{Key: k("a"), Value: []byte("1")}); err != nil {
		t.Fatalf("set: %v", err)
	}
	if err := mc.Add(&gomemcache.Item{Key: k("a"), Value: []byte("x")}); !errors.Is(err, gomemcache.ErrNotStored) {
		t.Fatalf("add of a present key: %v", err)
	}
	if err := mc.Add(&gomemcache.Item{Key: k("b"), Value: []byte("b")}); err != nil {
		t.Fatalf("add: %v", err)
	}
	if err := mc.Replace(&gomemcache.Item{Key: k("none"), Value: []byte("x")}); !errors.Is(err, gomemcache.ErrNotStored) {
		t.Fatalf("replace of a missing key: %v", err)
	}
	if err := mc.Append(&gomemcache.Item{Key: k("a"), Value: []byte("0")}); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := mc.Prepend(&gomemcache.Item{Key: k("a"), Value: []byte("2")}); err != nil {
		t.Fatalf("prepend: %v", err)
	}
	if v, err := mc.Increment(k("a"), 5); err != nil || v != 215 {
		t.Fatalf("incr: %v %v", v, err)
	}
	if v, err := mc.Decrement(k("a"), 1000); err != nil || v != 0 {
		t.Fatalf("decr: %v %v", v, err)
	}
	if _, err := mc.Increment(k("b"), 1); err == nil || !strings.Contains(err.Error(), "non-numeric") {
		t.Fatalf("incr of a non-number: %v", err)
	}
	it, err := mc.Get(k("b"))
	if err != nil {
		t.Fatal(err)
	}
	it.Value = []byte("new")
	if err := mc.CompareAndSwap(it); err != nil {
		t.Fatalf("cas: %v", err)
	}
	it.Value = []byte("stale")
	if err := mc.CompareAndSwap(it); !errors.Is(err, gomemcache.ErrCASConflict) {
		t.Fatalf("cas with a stale unique: %v", err)
	}
	if err := mc.Touch(k("b"), 0); err != nil {
		t.Fatalf("touch: %v", err)
	}
	if it, err := mc.Get(k("b")); err != nil || string(it.Value) != "new" {
		t.Fatalf("get after cas: %+v %v", it, err)
	}
	// Client flags and expiry.
	if err := mc.Set(&gomemcache.Item{Key: k("f"), Value: []byte("v"), Flags: 77, Expiration: 3600}); err != nil {
		t.Fatalf("set with flags and exptime: %v", err)
	}
	if err := mc.Append(&gomemcache.Item{Key: k("f"), Value: []byte("w")}); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := mc.Touch(k("f"), 7200); err != nil {
		t.Fatalf("touch with an exptime: %v", err)
	}
	if it, err := mc.Get(k("f")); err != nil || it.Flags != 77 || string(it.Value) != "vw" {
		t.Fatalf("get after touch: %+v %v", it, err)
	}
	// Meta.
	raw := dialMC(t, addr)
	if got := raw.line("ms " + k("m") + " 2 MS\r\nhi\r\n"); got != "HD" {
		t.Fatalf("ms: %q", got)
	}
	if got := raw.line("ms " + k("m") + " 1 ME\r\nx\r\n"); got != "NS" {
		t.Fatalf("ms add: %q", got)
	}
	if got := raw.line("ma " + k("n") + " N0 J41 v\r\n"); got != "VA 2" || raw.line("") != "41" {
		t.Fatalf("ma: %q", got)
	}
	if got := raw.line("ms " + k("m") + " 2 F5 T3600\r\nhi\r\n"); got != "HD" {
		t.Fatalf("ms with flags and TTL: %q", got)
	}
	if got := raw.line("mg " + k("m") + " f\r\n"); got != "HD f5" {
		t.Fatalf("mg f: %q", got)
	}
	if got := raw.line("md " + k("m") + "\r\n"); got != "HD" {
		t.Fatalf("md: %q", got)
	}
	// Binary.
	if st, _ := raw.binary(0x01, k("bin"), binSetExtras, "v1"); st != 0 {
		t.Fatalf("binary set: status %#x", st)
	}
	if st, _ := raw.binary(0x02, k("bin"), binSetExtras, "v2"); st != 2 {
		t.Fatalf("binary add of a present key: status %#x", st)
	}
	if st, _ := raw.binary(0x0e, k("bin"), "", "+"); st != 0 {
		t.Fatalf("binary append: status %#x", st)
	}
	if st, v := raw.binary(0x00, k("bin"), "", ""); st != 0 || v != "v1+" {
		t.Fatalf("binary get: %#x %q", st, v)
	}
	if st, _ := raw.binary(0x01, k("binf"), "\x00\x00\x00\x2a\x00\x00\x0e\x10", "x"); st != 0 {
		t.Fatalf("binary set with flags and expiration: status %#x", st)
	}
	if got := raw.line("mg " + k("binf") + " f v\r\n"); got != "VA 1 f42" || raw.line("") != "x" {
		t.Fatalf("mg of a binary set with flags: %q", got)
	}
	if st, _ := raw.binary(0x04, k("bin"), "", ""); st != 0 {
		t.Fatalf("binary delete: status %#x", st)
	}
}

// checkMemcacheReadOnly checks that every protocol reads through addr and
// that every write command is refused there.
func checkMemcacheReadOnly(t *testing.T, addr, key, value string) {
	t.Helper()
	mc := gomemcache.New(addr)
	mc.Timeout = 30 * time.Second
	deadline := time.Now().Add(60 * time.Second)
	for {
		it, err := mc.Get(key)
		if err == nil && string(it.Value) == value {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never served %s=%q: %+v %v", addr, key, value, it, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "only at the root") {
			t.Fatalf("%s at %s: %v, want a refusal", what, addr, err)
		}
	}
	refused("set", mc.Set(&gomemcache.Item{Key: key, Value: []byte("x")}))
	refused("add", mc.Add(&gomemcache.Item{Key: "new-key", Value: []byte("x")}))
	refused("append", mc.Append(&gomemcache.Item{Key: key, Value: []byte("x")}))
	_, err := mc.Increment(key, 1)
	refused("incr", err)
	refused("delete", mc.Delete(key))
	raw := dialMC(t, addr)
	if got := raw.line("mg " + key + " v\r\n"); got != fmt.Sprintf("VA %d", len(value)) || raw.line("") != value {
		t.Fatalf("mg at %s: %q", addr, got)
	}
	if got := raw.line("ms " + key + " 1\r\nx\r\n"); !strings.Contains(got, "only at the root") {
		t.Fatalf("ms at %s: %q", addr, got)
	}
	if st, v := raw.binary(0x00, key, "", ""); st != 0 || v != value {
		t.Fatalf("binary get at %s: %#x %q", addr, st, v)
	}
	if st, msg := raw.binary(0x01, key, binSetExtras, "x"); st != 0x83 || !strings.Contains(msg, "only at the root") {
		t.Fatalf("binary set at %s: %#x %q", addr, st, msg)
	}
	if it, err := mc.Get(key); err != nil || string(it.Value) != value {
		t.Fatalf("%s changed by refused writes: %+v %v", key, it, err)
	}
}

// TestMemcacheEveryRole: every memcached command of the text, meta and
// binary protocols works at a root; a replica and a proxy serve reads in
// every protocol and refuse every write.
func TestMemcacheEveryRole(t *testing.T) {
	root, replica, px := proxyTree(t)
	checkMemcacheWrites(t, root.Addr["memcache"], "r/")
	mc := gomemcache.New(root.Addr["memcache"])
	if err := mc.Set(&gomemcache.Item{Key: "shared", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	checkMemcacheReadOnly(t, replica.Addr["memcache"], "shared", "v")
	checkMemcacheReadOnly(t, px.Addr["memcache"], "shared", "v")

	// A get of 10,000 keys, as memcached serves it.
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("many/%05d", i)
	}
	if err := mc.Set(&gomemcache.Item{Key: keys[9999], Value: []byte("last")}); err != nil {
		t.Fatal(err)
	}
	got, err := mc.GetMulti(keys)
	if err != nil || len(got) != 1 || string(got[keys[9999]].Value) != "last" {
		t.Fatalf("get of 10,000 keys: %d items, %v", len(got), err)
	}
	raw := dialMC(t, root.Addr["memcache"])
	if got := raw.line("version\r\n"); !strings.HasPrefix(got, "VERSION ") || strings.Count(got, ".") != 2 {
		t.Fatalf("version: %q", got)
	}
}

// TestMemcacheAtHAFollower: a member of a replicated root that is not the
// leader takes every memcached write command, committed through the
// leader, and the other members apply the same outcome.
func TestMemcacheAtHAFollower(t *testing.T) {
	c := newRaftCluster(t, 3)
	c.startAll()
	lead := c.leader(60 * time.Second)
	var follower *raftMember
	for _, m := range c.members {
		if m != lead {
			follower = m
			break
		}
	}
	checkMemcacheWrites(t, follower.p.Addr["memcache"], "f/")
	c.waitSameApplied(1, 60*time.Second)
	for _, m := range c.members {
		mc := gomemcache.New(m.p.Addr["memcache"])
		mc.Timeout = 30 * time.Second
		it, err := mc.Get("f/b")
		if err != nil || string(it.Value) != "new" {
			t.Fatalf("member %d: f/b = %+v, %v", m.id, it, err)
		}
		it, err = mc.Get("f/a")
		if err != nil || string(it.Value) != "0" {
			t.Fatalf("member %d: f/a = %+v, %v", m.id, it, err)
		}
	}
}

// TestMemcacheFlushAll: flush_all deletes every key in one entry of the
// log where the database allows it, and replicas apply that entry; it is
// refused by default, silently with noreply, and changes nothing then.
func TestMemcacheFlushAll(t *testing.T) {
	dir := t.TempDir()
	root := startQS(t, dir, "--config", writeConfig(t, dir, "[[database]]\nname = \"default\"\nmemcache_flush_all = true\n"))
	replica := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	mc := gomemcache.New(root.Addr["memcache"])
	for i := range 50 {
		if err := mc.Set(&gomemcache.Item{Key: fmt.Sprint("k", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := statusOf(root.Addr["http"])
	if err != nil {
		t.Fatal(err)
	}
	flushed := st.Applied + 1
	if err := mc.FlushAll(); err != nil {
		t.Fatalf("flush_all: %v", err)
	}
	raw := dialMC(t, root.Addr["memcache"])
	if got := raw.line("mg k0 v\r\n"); got != "EN" {
		t.Fatalf("k0 after flush_all: %q", got)
	}
	if st, err = statusOf(root.Addr["http"]); err != nil || st.Applied != flushed {
		t.Fatalf("flush_all of 50 keys is not one entry: applied %d, want %d, %v", st.Applied, flushed, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		rs, err := statusOf(replica.Addr["http"])
		if err == nil && rs.Applied == flushed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never applied the flush: %+v %v", rs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := gomemcache.New(replica.Addr["memcache"]).Get("k7"); !errors.Is(err, gomemcache.ErrCacheMiss) {
		t.Fatalf("k7 at the replica after flush_all: %v", err)
	}
	if got := dialMC(t, replica.Addr["memcache"]).line("flush_all\r\n"); !strings.Contains(got, "only at the root") {
		t.Fatalf("flush_all at a replica: %q", got)
	}

	// Off by default.
	other := startQS(t, t.TempDir())
	mc = gomemcache.New(other.Addr["memcache"])
	if err := mc.Set(&gomemcache.Item{Key: "keep", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	raw = dialMC(t, other.Addr["memcache"])
	if got := raw.line("flush_all noreply\r\nflush_all\r\n"); !strings.Contains(got, "memcache_flush_all = false") {
		t.Fatalf("flush_all where it is off: %q", got)
	}
	if it, err := mc.Get("keep"); err != nil || string(it.Value) != "v" {
		t.Fatalf("refused flush_all changed data: %+v %v", it, err)
	}
}
