package repl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
)

// ReplicaConfig configures a Replica. The zero value of every field but
// Sources means its default, filled in by EnsureDefaults.
type ReplicaConfig struct {
	// Database is the name asked for in the Hello. Default: the store's name.
	Database string
	// Sources are the addresses to replicate from, in order of preference.
	// After a failure the replica moves on to the next one. Required
	// unless Finder is set.
	Sources []string
	// Finder, when set, replaces Sources: it is asked for the list before
	// every attempt, and told of each source that failed.
	Finder SourceFinder
	// ProcessID identifies this process. Default DefaultProcessID.
	ProcessID ProcessID
	// IdleTimeout: a source from which nothing arrived for this long (no
	// byte of entries or progress) is dropped. Default 30s.
	IdleTimeout time.Duration
	// DialTimeout bounds a TCP connect. Default 5s.
	DialTimeout time.Duration
	// HandshakeTimeout bounds sending the Hello and receiving the answer.
	// Default 10s.
	HandshakeTimeout time.Duration
	// BackoffMin and BackoffMax bound the jittered, doubling pause between
	// connection attempts; a session that applied entries resets it.
	// Defaults 100ms and 5s.
	BackoffMin, BackoffMax time.Duration
	// Dial opens a connection. Default: a net.Dialer (TLS will wrap it here).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// BootstrapLock is the file whose lock allows one bootstrap per host
	// at a time. Default qs-bootstrap.lock in os.TempDir().
	BootstrapLock string
	// BootstrapMinEntries: a new replica (applied index 0) whose source
	// is more entries ahead than this bootstraps from a snapshot instead
	// of replaying the log. Default 10000; negative: only when the source
	// no longer retains the log it needs.
	BootstrapMinEntries int64
	// Report returns the report sent to the source every ReportInterval
	// (report.go), nil to skip one. Nil: no reports.
	Report func() []byte
	// ReportInterval is how often Report is sent. Default 1s.
	ReportInterval time.Duration
	// Verifier, when set, holds the cluster's public key: entries are
	// applied only once a head signed by the root vouches for them, and
	// a stream that does not verify is refused (heads.go). Nil: entries
	// are applied once their hash chain checks.
	Verifier *headsig.Verifier
	// MaxUnsignedBytes is the most entry bytes held back waiting for a
	// signed head; a source that sends more without one is dropped.
	// Default 256 MiB.
	MaxUnsignedBytes int
	// BeforeApply, when set, is called with the last index of each
	// verified batch after it is offered to the children (cut-through,
	// relay.go) and before the store applies it. Crash tests use it.
	BeforeApply func(last uint64)
	// Metrics counts what the replica does, labelled with Database; the
	// process gives all its replicas and servers the one it registered.
	// Default: a private NewMetrics(), registered nowhere.
	Metrics *Metrics
}

// EnsureDefaults fills zero fields with their defaults and returns c.
func (c *ReplicaConfig) EnsureDefaults(st *store.Store) *ReplicaConfig {
	if c.Database == "" && st != nil {
		c.Database = st.Name()
	}
	if c.ProcessID.IsZero() {
		c.ProcessID = DefaultProcessID
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 5 * time.Second
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	if c.BootstrapLock == "" {
		c.BootstrapLock = filepath.Join(os.TempDir(), "qs-bootstrap.lock")
	}
	if c.BootstrapMinEntries == 0 {
		c.BootstrapMinEntries = 10000
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = time.Second
	}
	if c.MaxUnsignedBytes == 0 {
		c.MaxUnsignedBytes = 256 << 20
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	return c
}

// Validate reports the first invalid field.
func (c *ReplicaConfig) Validate() error {
	switch {
	case len(c.Sources) == 0 && c.Finder == nil:
		return errors.New("repl: no replication sources")
	case len(c.Database) > MaxDatabaseName:
		return fmt.Errorf("repl: database name of %d bytes over %d", len(c.Database), MaxDatabaseName)
	case c.IdleTimeout < time.Millisecond:
		return fmt.Errorf("repl: IdleTimeout %v below 1ms", c.IdleTimeout)
	case c.DialTimeout < time.Millisecond:
		return fmt.Errorf("repl: DialTimeout %v below 1ms", c.DialTimeout)
	case c.HandshakeTimeout < time.Millisecond:
		return fmt.Errorf("repl: HandshakeTimeout %v below 1ms", c.HandshakeTimeout)
	case c.BackoffMin < time.Millisecond || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("repl: backoff %v..%v invalid", c.BackoffMin, c.BackoffMax)
	case c.MaxUnsignedBytes < 1:
		return fmt.Errorf("repl: MaxUnsignedBytes %d below 1", c.MaxUnsignedBytes)
	}
	return nil
}

// SourceFinder finds a replica's sources (through the gossip overlay).
type SourceFinder interface {
	// Sources returns the addresses to try, in order of preference;
	// empty while none is known.
	Sources() []string
	// Failed reports that connecting to or streaming from addr failed,
	// or that it refused (not for want of log: that is no fault).
	Failed(addr string)
}
