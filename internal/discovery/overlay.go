package discovery

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/coordinate"
)

// Config configures an Overlay. The zero value of every field but
// NodeName and Bind means its default.
type Config struct {
	// NodeName is this member's name, unique in the overlay. Required.
	NodeName string
	// Bind is the gossip address (UDP and TCP on the same port); port 0
	// lets the kernel choose. Required.
	Bind string
	// Join names seed members (gossip addresses); empty: start alone and
	// wait for others to join.
	Join []string
	// Key encrypts and authenticates the overlay (16, 24 or 32 bytes; see
	// GossipKey). Without it the overlay binds only to loopback, unless
	// Insecure.
	Key []byte
	// MoreKeys are keys accepted besides Key during a rotation of the
	// cluster key (SetKeys changes them while the overlay runs).
	MoreKeys [][]byte
	Insecure bool
	// ProbeInterval is how often a member probes another one (and so
	// measures a round trip). Default: memberlist's preset, 1s.
	ProbeInterval time.Duration
	// GossipInterval is how often a member passes the changes it heard
	// on (to 3 others). Default: memberlist's preset, 200ms (100ms on
	// loopback). Longer: less CPU and fewer packets, slower news.
	GossipInterval time.Duration
	// RelaysPerDC is how many relays each data centre elects among the
	// proxies of a database (ElectRelays). Default 2.
	RelaysPerDC int
	// CheckInterval is how often this member probes, directly, each
	// member it depends on (Dependencies) or watches (Watch); one that
	// misses SuspectAfter probes in a row is Suspect. Default: the probe
	// interval.
	CheckInterval time.Duration
	// RejoinInterval is how often a member that no longer sees one of its
	// seeds alive contacts it again, so the overlay heals after a
	// partition. Default 30s.
	RejoinInterval time.Duration
	// Link applies latency and loss to what this member sends (tests).
	Link Link
	// Log receives memberlist's warnings and errors. Default slog.Default.
	Log *slog.Logger
	// Metrics count for the overlay and its agents; nil: a private
	// NewMetrics, registered nowhere.
	Metrics *Metrics
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Bind)
	switch {
	case c.NodeName == "":
		return errors.New("discovery: a node name is required")
	case err != nil:
		return fmt.Errorf("discovery: gossip address %q: %v", c.Bind, err)
	case len(c.Key) != 0 && len(c.Key) != 16 && len(c.Key) != 24 && len(c.Key) != 32:
		return fmt.Errorf("discovery: gossip key of %d bytes, want 16, 24 or 32", len(c.Key))
	case len(c.Key) == 0 && !c.Insecure && !isLoopback(host):
		return fmt.Errorf("discovery: gossip address %s is not loopback: the overlay needs a cluster key (or insecure, for a trusted network)", c.Bind)
	case c.ProbeInterval < 0:
		return fmt.Errorf("discovery: probe interval %v is negative", c.ProbeInterval)
	case c.GossipInterval < 0:
		return fmt.Errorf("discovery: gossip interval %v is negative", c.GossipInterval)
	case c.CheckInterval < 0:
		return fmt.Errorf("discovery: check interval %v is negative", c.CheckInterval)
	case c.RelaysPerDC < 0:
		return fmt.Errorf("discovery: %d relays per data centre is negative", c.RelaysPerDC)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("discovery: gossip port %q: %v", port, err)
	}
	return nil
}

func (c *Config) relaysPerDC() int {
	if c.RelaysPerDC == 0 {
		return DefaultRelaysPerDC
	}
	return c.RelaysPerDC
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// minSamples is how many round trips to a member are measured before its
// estimate is used: Vivaldi's first answers are noise, and a move on
// noise would make the tree flap at start.
const minSamples = 3

// Member is one live member of the overlay, as seen from here.
type Member struct {
	Name   string
	Gossip string // its gossip address
	Meta   Meta
	// RTT is the estimated round trip from this member; negative: no
	// estimate yet. Zero for this member itself.
	RTT  time.Duration
	Self bool
	// Suspect: this member depends on it (Dependencies) or watches it
	// (Watch) and it missed this member's last SuspectAfter direct probes. It is this member's
	// own view: it lasts until the member answers a probe again, or the
	// overlay declares it dead and it leaves the list.
	Suspect bool
}

// Overlay is this process's membership of the gossip overlay.
type Overlay struct {
	cfg     Config
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring // nil without a key
	coord   *coordinate.Client
	log     *slog.Logger
	m       *Metrics

	addr  string // the gossip address advertised
	leave sync.Once
	left  error
	// stopChecks ends the probes of the dependencies; checking ends with
	// them.
	stopChecks context.CancelFunc
	checking   sync.WaitGroup
	// live counts the members memberlist reported joined and not left.
	live atomic.Int64

	mu struct {
		sync.Mutex
		meta    []byte
		coords  map[string]*coordinate.Coordinate // by member name
		samples map[string]int                    // round trips measured, by member name
		nodes   map[string]node                   // live members, by name
		misses  map[string]int                    // direct probes missed in a row, by dependency's name
		watched map[string]bool                   // probed besides the dependencies until they answer (Watch)
		changed chan struct{}                     // closed at the next change
	}
}

// node is what this member keeps of a live member, copied from
// memberlist's node table in its event callbacks (which memberlist calls
// under the lock that guards that table): memberlist rewrites a node in
// place when an alive message arrives, so the nodes it returns are never
// read anywhere else. The meta is decoded once, when it arrives: the
// member list is read every second by every agent, and metas change far
// less often than that.
type node struct {
	gossip string // host:port
	meta   Meta
	err    error // the meta could not be decoded
}

// Start joins the overlay: it binds the gossip address, then contacts the
// seeds (a seed that cannot be reached is logged, not fatal: the member
// waits to be found). local is the first advertisement.
func Start(cfg Config, local Meta) (*Overlay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	o := &Overlay{cfg: cfg, log: cfg.Log.With("component", "discovery"), m: cfg.Metrics}
	o.mu.coords = map[string]*coordinate.Coordinate{}
	o.mu.samples = map[string]int{}
	o.mu.nodes = map[string]node{}
	o.mu.misses = map[string]int{}
	o.mu.watched = map[string]bool{}
	var err error
	if o.coord, err = coordinate.NewClient(coordinate.DefaultConfig()); err != nil {
		return nil, err
	}
	o.setMetaLocked(local)

	host, portStr, _ := net.SplitHostPort(cfg.Bind)
	port, _ := strconv.Atoi(portStr)
	mc := memberlist.DefaultLANConfig()
	if isLoopback(host) {
		mc = memberlist.DefaultLocalConfig()
	}
	mc.Name = cfg.NodeName
	// The LAN preset's TCP timeout for a join's state exchange, also on
	// loopback: a seed that many members join at once answers late.
	mc.TCPTimeout = 10 * time.Second
	if cfg.ProbeInterval > 0 {
		mc.ProbeInterval = cfg.ProbeInterval
	}
	if cfg.GossipInterval > 0 {
		mc.GossipInterval = cfg.GossipInterval
	}
	logger := log.New(&memberlistLog{log: o.log}, "", 0)
	mc.Logger = logger
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("discovery: listen on %s: %w", cfg.Bind, err)
	}
	mc.BindAddr, mc.BindPort = host, nt.GetAutoBindPort()
	mc.AdvertiseAddr, mc.AdvertisePort = "", mc.BindPort
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		mc.AdvertiseAddr = host
	}
	mc.Transport = newMeteredTransport(nt, cfg.Link, o.m)
	if len(cfg.Key) > 0 {
		if o.keyring, err = memberlist.NewKeyring(cfg.MoreKeys, cfg.Key); err != nil {
			nt.Shutdown()
			return nil, fmt.Errorf("discovery: gossip keys: %w", err)
		}
		mc.Keyring = o.keyring
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	d := &delegate{o: o}
	mc.Delegate, mc.Events, mc.Ping = d, d, d
	if o.ml, err = memberlist.Create(mc); err != nil {
		mc.Transport.Shutdown()
		return nil, fmt.Errorf("discovery: start gossip on %s: %w", cfg.Bind, err)
	}
	// memberlist announced this member to itself as it started.
	o.mu.Lock()
	o.addr = o.mu.nodes[cfg.NodeName].gossip
	o.mu.Unlock()
	if len(cfg.Join) > 0 {
		if _, err := o.ml.Join(cfg.Join); err != nil {
			o.log.Warn("no gossip seed answered yet; waiting to be found", "seeds", cfg.Join, "err", err)
		}
	}
	every := cfg.CheckInterval
	if every == 0 {
		every = mc.ProbeInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	o.stopChecks = cancel
	o.checking.Add(1)
	go func() {
		defer o.checking.Done()
		o.checkDependencies(ctx, every)
	}()
	return o, nil
}

// Addr is the gossip address this member advertises.
func (o *Overlay) Addr() string { return o.addr }

// Size is the number of live members, this one included.
func (o *Overlay) Size() int { return o.ml.NumMembers() }

// Name is this member's name.
func (o *Overlay) Name() string { return o.cfg.NodeName }

// Join contacts more seeds.
func (o *Overlay) Join(seeds []string) error {
	_, err := o.ml.Join(seeds)
	return err
}

// SetLocal changes this member's advertisement; the overlay learns it
// within a gossip round.
func (o *Overlay) SetLocal(m Meta) error {
	o.mu.Lock()
	changed := o.setMetaLocked(m)
	o.mu.Unlock()
	if !changed {
		return nil
	}
	return o.ml.UpdateNode(5 * time.Second)
}

func (o *Overlay) setMetaLocked(m Meta) bool {
	b, dropped := m.Encode()
	o.m.metaDropped.Set(float64(dropped))
	if dropped > 0 {
		o.log.Warn("databases left out of the gossip advertisement (512-byte limit)", "dropped", dropped)
	}
	if bytes.Equal(b, o.mu.meta) {
		return false
	}
	o.mu.meta = b
	return true
}

// Members returns the live members, this one included, sorted by name.
// Members whose meta cannot be decoded are left out (and counted). The
// metas are shared between callers: read them, never change them.
func (o *Overlay) Members() []Member {
	self := o.coord.GetCoordinate()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Member, 0, len(o.mu.nodes))
	for name, n := range o.mu.nodes {
		if n.err != nil {
			continue // counted when it arrived (NotifyJoin/NotifyUpdate)
		}
		m := Member{Name: name, Gossip: n.gossip, Meta: n.meta, RTT: -1, Suspect: o.mu.misses[name] >= SuspectAfter}
		switch c, ok := o.mu.coords[name]; {
		case name == o.cfg.NodeName:
			m.Self, m.RTT = true, 0
		case ok && c.IsCompatibleWith(self) && o.mu.samples[name] >= minSamples:
			m.RTT = self.DistanceTo(c)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Changed returns a channel closed at the next change of the member
// list: a member joins, leaves (or is declared dead), changes its
// advertisement, or turns suspect or answers again.
func (o *Overlay) Changed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.mu.changed == nil {
		o.mu.changed = make(chan struct{})
	}
	return o.mu.changed
}

// notifyChangeLocked closes the channel Changed returned. The caller
// holds o.mu and has just changed what Members reports, so a reader
// that sees the change also finds the channel closed.
func (o *Overlay) notifyChangeLocked() {
	if o.mu.changed != nil {
		close(o.mu.changed)
		o.mu.changed = nil
	}
}

// Leave tells the others this member goes, then stops gossiping. Later
// calls return the first one's answer.
func (o *Overlay) Leave(timeout time.Duration) error {
	o.leave.Do(func() {
		o.stopChecks()
		o.checking.Wait()
		o.left = o.ml.Leave(timeout)
		if err := o.ml.Shutdown(); o.left == nil {
			o.left = err
		}
	})
	return o.left
}

// Rejoin contacts again, every RejoinInterval until ctx ends, the seeds
// this member does not see alive: two halves of an overlay that a
// partition split (each declared the other dead) merge again.
func (o *Overlay) Rejoin(ctx context.Context, seeds []string) {
	if len(seeds) == 0 {
		return
	}
	every := o.cfg.RejoinInterval
	if every <= 0 {
		every = 30 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		alive := map[string]bool{}
		for _, m := range o.Members() {
			alive[m.Gossip] = true
		}
		var missing []string
		for _, s := range seeds {
			if !alive[s] {
				missing = append(missing, s)
			}
		}
		if len(missing) == 0 {
			continue
		}
		if n, err := o.ml.Join(missing); err != nil {
			o.log.Debug("seeds not reached", "seeds", missing, "reached", n, "err", err)
		}
	}
}

// delegate is memberlist's view of the Overlay.
type delegate struct{ o *Overlay }

func (d *delegate) NodeMeta(limit int) []byte {
	d.o.mu.Lock()
	defer d.o.mu.Unlock()
	if len(d.o.mu.meta) > limit {
		return nil // cannot happen: Encode keeps under MetaMaxSize
	}
	return d.o.mu.meta
}

// The overlay carries nothing but metas: no user messages, no extra state.
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// memberlist calls the event callbacks holding the lock of its node
// table: n is read here, and only here (see node).

func (d *delegate) NotifyJoin(n *memberlist.Node) {
	d.o.m.members.Set(float64(d.o.live.Add(1)))
	d.remember(n)
}

func (d *delegate) NotifyLeave(n *memberlist.Node) {
	d.o.coord.ForgetNode(n.Name)
	d.o.mu.Lock()
	delete(d.o.mu.coords, n.Name)
	delete(d.o.mu.samples, n.Name)
	delete(d.o.mu.nodes, n.Name)
	delete(d.o.mu.misses, n.Name)
	delete(d.o.mu.watched, n.Name)
	d.o.notifyChangeLocked()
	d.o.mu.Unlock()
	d.o.m.members.Set(float64(d.o.live.Add(-1)))
}

func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	d.remember(n)
}

// remember copies member n into the overlay's own list, its meta
// decoded, and notifies the change.
func (d *delegate) remember(n *memberlist.Node) {
	c := node{gossip: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))}
	c.meta, c.err = DecodeMeta(n.Meta)
	d.o.mu.Lock()
	d.o.mu.nodes[n.Name] = c
	d.o.notifyChangeLocked()
	d.o.mu.Unlock()
	if c.err != nil {
		d.o.m.badMeta.Inc()
		d.o.log.Warn("member advertises a meta this node cannot read; ignored", "member", n.Name, "err", c.err)
	}
}

// AckPayload carries this member's coordinate in each probe ack.
func (d *delegate) AckPayload() []byte {
	return encodeCoordinate(d.o.coord.GetCoordinate())
}

// NotifyPingComplete feeds a measured round trip, with the coordinate the
// other member sent, to Vivaldi.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	if len(payload) == 0 {
		return // a member that sends no coordinate
	}
	c, err := decodeCoordinate(payload)
	if err != nil {
		d.o.m.badMeta.Inc()
		d.o.log.Debug("bad coordinate in probe ack", "member", other.Name, "err", err)
		return
	}
	if _, err := d.o.coord.Update(other.Name, c, rtt); err != nil {
		d.o.m.badMeta.Inc()
		d.o.log.Debug("coordinate not used", "member", other.Name, "err", err)
		return
	}
	d.o.mu.Lock()
	d.o.mu.coords[other.Name] = c
	d.o.mu.samples[other.Name]++
	d.o.mu.Unlock()
}

// A coordinate on the wire:
//
//	coord := dims(1) vec(8 BE float64)* error(8) adjustment(8) height(8)
func encodeCoordinate(c *coordinate.Coordinate) []byte {
	b := []byte{byte(len(c.Vec))}
	for _, f := range append(slices.Clone(c.Vec), c.Error, c.Adjustment, c.Height) {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
	}
	return b
}

func decodeCoordinate(b []byte) (*coordinate.Coordinate, error) {
	if len(b) < 1 || len(b) != 1+8*(int(b[0])+3) || b[0] == 0 {
		return nil, fmt.Errorf("coordinate of %d bytes", len(b))
	}
	n := int(b[0])
	f := make([]float64, n+3)
	for i := range f {
		f[i] = math.Float64frombits(binary.BigEndian.Uint64(b[1+8*i:]))
	}
	c := &coordinate.Coordinate{Vec: f[:n], Error: f[n], Adjustment: f[n+1], Height: f[n+2]}
	if !c.IsValid() {
		return nil, errors.New("coordinate with a NaN or infinite component")
	}
	return c, nil
}

// memberlistLog passes memberlist's log lines on: warnings and errors
// at their level, the rest at debug.
type memberlistLog struct{ log *slog.Logger }

func (l *memberlistLog) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	switch {
	case bytes.Contains(p, []byte("[ERR]")):
		l.log.Error(line)
	case bytes.Contains(p, []byte("[WARN]")):
		l.log.Warn(line)
	default:
		l.log.Debug(line)
	}
	return len(p), nil
}

var _ io.Writer = (*memberlistLog)(nil)

// SetKeys replaces the overlay's keys while it runs: messages are sealed
// with primary from now on, and opened with primary or any of more.
func (o *Overlay) SetKeys(primary []byte, more [][]byte) error {
	if o.keyring == nil {
		return errors.New("discovery: the overlay runs without a key; restart to add one")
	}
	for _, k := range append([][]byte{primary}, more...) {
		if err := o.keyring.AddKey(k); err != nil {
			return fmt.Errorf("discovery: gossip key: %w", err)
		}
	}
	if err := o.keyring.UseKey(primary); err != nil {
		return err
	}
	keep := map[string]bool{string(primary): true}
	for _, k := range more {
		keep[string(k)] = true
	}
	for _, k := range o.keyring.GetKeys() {
		if !keep[string(k)] {
			if err := o.keyring.RemoveKey(k); err != nil {
				return err
			}
		}
	}
	return nil
}
