package repl

import (
	"fmt"
	"time"
)

// ServerConfig configures a replication server. The zero value of every
// field means its default, filled in by EnsureDefaults.
type ServerConfig struct {
	// ProcessID identifies this process. Default DefaultProcessID.
	ProcessID ProcessID
	// MaxBatchEntries is the most entries in one Entries message.
	// Default 1000.
	MaxBatchEntries int
	// MaxBatchBytes is the entry body size after which an Entries message
	// is sent (one entry may exceed it). Default 4 MiB; at most MaxPayload/2.
	MaxBatchBytes int
	// ProgressInterval is how often an idle stream sends Progress.
	// Default 1s.
	ProgressInterval time.Duration
	// HandshakeTimeout bounds reading the Hello. Default 10s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds each write of up to 256 KiB of a message (a
	// client that reads nothing for this long is dropped). Default 30s.
	WriteTimeout time.Duration
	// BootstrapRate caps the bytes per second of snapshot files sent, all
	// bootstraps together, so bootstrapping replicas cannot starve the
	// disk or the network of this server. 0: unlimited.
	BootstrapRate int64
	// SnapshotKeep is how long a snapshot is reused for new bootstraps and
	// kept after its last use so interrupted ones can resume. Default 10m.
	SnapshotKeep time.Duration
	// ChunkBytes is the size of the snapshot file chunks. Default 512 KiB.
	ChunkBytes int
	// FetchIdleTimeout closes a fetch connection that sent no request
	// for this long. Default 10m.
	FetchIdleTimeout time.Duration
	// AcceptChild, when set, is asked before the log stream of database
	// db to the replica of process client is accepted; a RefusedError
	// refuses it with its code (a replica that finds its sources through
	// the overlay takes no new child while it has no source itself, nor
	// one of its own ancestors). Default: accept.
	AcceptChild func(db string, client ProcessID) *RefusedError
	// Relay, when set, names the proxy databases this server is the
	// relay of: it answers their fetch connections (for the proxies of its
	// data centre) from its own cache, fetching the rest from its
	// replicas. Other proxy databases refuse fetches. Default: none.
	Relay func(db string) bool
	// MaxChildren caps the replicas streaming the log of one database
	// from this server at once (its children in the tree); one more is
	// refused "full". Connections that only watch the newest entries,
	// stop at an index, fetch values or bootstrap do not count. 0: no cap.
	MaxChildren int
	// Reports takes the reports of stream clients (report.go). Nil: they
	// are read and dropped.
	Reports ReportSink
	// ReportMinInterval: a client's report sooner than this after its
	// previous one is dropped. Default 500ms (clients report every 1s).
	ReportMinInterval time.Duration
	// Heads gives the signed heads sent with the log of database db to
	// clients of HeadVersion or later (heads.go). Nil: none are sent.
	Heads func(db string) HeadSource
	// NodeName is this node's name in its data centre, sent to the
	// clients of L2 connections (protocol_shard.go): it decides which
	// shard of the data centre's L2 cache the node owns. Empty: L2
	// connections are refused.
	NodeName string
	// RootHTTP gives the HTTP addresses where the writes of database db
	// are accepted, as this node knows them now, sent to stream clients
	// of RootVersion or later (protocol_root.go). Nil: none are sent.
	RootHTTP func(db string) []string
	// Path gives this node's path in the tree of database db, sent to
	// stream clients of PathVersion or later when it changes
	// (protocol_path.go). Nil, or a nil PathSource: none are sent.
	Path func(db string) PathSource
	// Metrics counts what the server does; the process gives all its
	// servers and replicas the one it registered. Default: a private
	// NewMetrics(), registered nowhere.
	Metrics *Metrics
}

// EnsureDefaults fills zero fields with their defaults and returns c.
func (c *ServerConfig) EnsureDefaults() *ServerConfig {
	if c.ProcessID.IsZero() {
		c.ProcessID = DefaultProcessID
	}
	if c.MaxBatchEntries == 0 {
		c.MaxBatchEntries = 1000
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = time.Second
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.SnapshotKeep == 0 {
		c.SnapshotKeep = 10 * time.Minute
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = 512 << 10
	}
	if c.FetchIdleTimeout == 0 {
		c.FetchIdleTimeout = 10 * time.Minute
	}
	if c.ReportMinInterval == 0 {
		c.ReportMinInterval = 500 * time.Millisecond
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	return c
}

// Validate reports the first invalid field.
func (c *ServerConfig) Validate() error {
	switch {
	case c.MaxBatchEntries < 1:
		return fmt.Errorf("repl: MaxBatchEntries %d below 1", c.MaxBatchEntries)
	case c.MaxBatchBytes < 1 || c.MaxBatchBytes > MaxPayload/2:
		return fmt.Errorf("repl: MaxBatchBytes %d out of range 1..%d", c.MaxBatchBytes, MaxPayload/2)
	case c.ProgressInterval < time.Millisecond:
		return fmt.Errorf("repl: ProgressInterval %v below 1ms", c.ProgressInterval)
	case c.HandshakeTimeout < time.Millisecond:
		return fmt.Errorf("repl: HandshakeTimeout %v below 1ms", c.HandshakeTimeout)
	case c.WriteTimeout < time.Millisecond:
		return fmt.Errorf("repl: WriteTimeout %v below 1ms", c.WriteTimeout)
	case c.BootstrapRate < 0:
		return fmt.Errorf("repl: BootstrapRate %d is negative", c.BootstrapRate)
	case c.SnapshotKeep < time.Second:
		return fmt.Errorf("repl: SnapshotKeep %v below 1s", c.SnapshotKeep)
	case c.ChunkBytes < 1 || c.ChunkBytes > MaxPayload/2:
		return fmt.Errorf("repl: ChunkBytes %d out of range 1..%d", c.ChunkBytes, MaxPayload/2)
	case c.FetchIdleTimeout < time.Millisecond:
		return fmt.Errorf("repl: FetchIdleTimeout %v below 1ms", c.FetchIdleTimeout)
	case c.MaxChildren < 0:
		return fmt.Errorf("repl: MaxChildren %d is negative", c.MaxChildren)
	case len(c.NodeName) > MaxNodeName:
		return fmt.Errorf("repl: NodeName of %d bytes over %d", len(c.NodeName), MaxNodeName)
	}
	return nil
}
