package watch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// turnLease is the longest a write turn lasts: a write still under way
// then (its client not reading, its thread descheduled) goes on outside
// the budget, so that it holds up no other watcher.
const turnLease = 2 * time.Millisecond

// Config holds the limits of one Hub. A zero field means its default;
// EnsureDefaults fills them and Validate rejects what the hub cannot use.
type Config struct {
	// Budget is the limits shared by the hubs of a process: how many
	// watchers, how many writes per second and at once (see Limits). Nil:
	// the hub gets a budget of its own with DefaultLimits.
	Budget *Budget
	// Metrics is where the hub counts, its series labelled with the
	// store's name (db). Nil: where its budget counts (NewBudget), so
	// that the hubs of a process count with their budget in one Metrics;
	// a hub without Budget then counts in a Metrics of its own.
	Metrics *Metrics
	// BufferBatches and BufferBytes bound the changes kept for the live
	// subscribers of one prefix (shared by all of them): the newest batches
	// (the prefix's changes of one hub read, at most ReadBatchEntries
	// entries) within both bounds. The hub never waits for a subscriber:
	// one that falls further behind is cut with ErrSlow and may resume
	// from the last index it received. Bytes count keys and values.
	// Defaults 1024 batches and 64 MiB.
	BufferBatches int
	BufferBytes   int
	// CoalesceBytes bounds the changes (keys and values) one write of a
	// watch stream carries when several batches are waiting. Default
	// 256 KiB; a single larger batch is written whole.
	CoalesceBytes int
	// ReadBatchEntries and ReadBatchBytes bound one ReadLog call, of the hub
	// and of a catching-up subscriber. Defaults 1024 entries and 4 MiB.
	ReadBatchEntries int
	ReadBatchBytes   int
	// ProgressInterval is how often an idle watch stream reports the index
	// it is complete through, each time within ±25% (ProgressWait), so that
	// watchers opened together do not report together. Default 1s.
	ProgressInterval time.Duration
	// WriteTimeout bounds the writes of a watch stream to its client: a
	// client that reads nothing for WriteTimeout/2 to WriteTimeout is
	// disconnected (the deadline is moved once half of it is used).
	// Default 10s.
	WriteTimeout time.Duration
	// RetryInterval is how long the hub waits before reading the log again
	// after a read error. Default 100ms.
	RetryInterval time.Duration
}

// DefaultConfig returns every default (Budget nil: one of the hub's own).
func DefaultConfig() Config {
	return Config{
		BufferBatches:    1024,
		BufferBytes:      64 << 20,
		CoalesceBytes:    256 << 10,
		ReadBatchEntries: 1024,
		ReadBatchBytes:   4 << 20,
		ProgressInterval: time.Second,
		WriteTimeout:     10 * time.Second,
		RetryInterval:    100 * time.Millisecond,
	}
}

// EnsureDefaults sets every zero field to its default.
func (c *Config) EnsureDefaults() {
	d := DefaultConfig()
	if c.BufferBatches == 0 {
		c.BufferBatches = d.BufferBatches
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = d.BufferBytes
	}
	if c.CoalesceBytes == 0 {
		c.CoalesceBytes = d.CoalesceBytes
	}
	if c.ReadBatchEntries == 0 {
		c.ReadBatchEntries = d.ReadBatchEntries
	}
	if c.ReadBatchBytes == 0 {
		c.ReadBatchBytes = d.ReadBatchBytes
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = d.RetryInterval
	}
}

// Validate reports every field the hub cannot work with. It expects
// defaults to have been applied.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("watch config: "+format, args...))
		}
	}
	check(c.BufferBatches >= 1, "BufferBatches %d must be at least 1", c.BufferBatches)
	check(c.BufferBytes >= 1, "BufferBytes %d must be at least 1", c.BufferBytes)
	check(c.CoalesceBytes >= 1, "CoalesceBytes %d must be at least 1", c.CoalesceBytes)
	check(c.ReadBatchEntries >= 1, "ReadBatchEntries %d must be at least 1", c.ReadBatchEntries)
	check(c.ReadBatchBytes >= 1, "ReadBatchBytes %d must be at least 1", c.ReadBatchBytes)
	check(c.ProgressInterval > 0, "ProgressInterval %v must be positive", c.ProgressInterval)
	check(c.WriteTimeout > 0, "WriteTimeout %v must be positive", c.WriteTimeout)
	check(c.RetryInterval > 0, "RetryInterval %v must be positive", c.RetryInterval)
	return errors.Join(errs...)
}

// ProgressWait returns how long a watch stream waits for changes before
// its next progress line: ProgressInterval ±25%, drawn anew each time.
func (c *Config) ProgressWait() time.Duration {
	return c.ProgressInterval*3/4 + rand.N(c.ProgressInterval/2+1)
}
