package watch

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the limits of one Hub. A zero field means its default;
// EnsureDefaults fills them and Validate rejects what the hub cannot use.
type Config struct {
	// MaxWatchers is the most subscribers one hub serves at once, catching
	// up or live; Subscribe beyond it fails with ErrTooManyWatchers.
	// Default 10,000.
	MaxWatchers int
	// BufferBatches is how many undelivered batches of events a live
	// subscriber may have queued. The hub never waits for a subscriber: one
	// whose buffer is full is cut with ErrSlow. Each batch holds the matching
	// changes of at most ReadBatchEntries entries. Default 256.
	BufferBatches int
	// ReadBatchEntries and ReadBatchBytes bound one ReadLog call, of the hub
	// and of a catching-up subscriber. Defaults 1024 entries and 4 MiB.
	ReadBatchEntries int
	ReadBatchBytes   int
	// ProgressInterval is how often an idle watch stream reports the index
	// it is complete through. Default 1s.
	ProgressInterval time.Duration
	// WriteTimeout bounds one write of a watch stream to its client; a
	// client that does not read for that long is disconnected. Default 10s.
	WriteTimeout time.Duration
	// RetryInterval is how long the hub waits before reading the log again
	// after a read error. Default 100ms.
	RetryInterval time.Duration
}

// DefaultConfig returns every default.
func DefaultConfig() Config {
	return Config{
		MaxWatchers:      10_000,
		BufferBatches:    256,
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
	if c.MaxWatchers == 0 {
		c.MaxWatchers = d.MaxWatchers
	}
	if c.BufferBatches == 0 {
		c.BufferBatches = d.BufferBatches
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
	check(c.MaxWatchers >= 1, "MaxWatchers %d must be at least 1", c.MaxWatchers)
	check(c.BufferBatches >= 1, "BufferBatches %d must be at least 1", c.BufferBatches)
	check(c.ReadBatchEntries >= 1, "ReadBatchEntries %d must be at least 1", c.ReadBatchEntries)
	check(c.ReadBatchBytes >= 1, "ReadBatchBytes %d must be at least 1", c.ReadBatchBytes)
	check(c.ProgressInterval > 0, "ProgressInterval %v must be positive", c.ProgressInterval)
	check(c.WriteTimeout > 0, "WriteTimeout %v must be positive", c.WriteTimeout)
	check(c.RetryInterval > 0, "RetryInterval %v must be positive", c.RetryInterval)
	return errors.Join(errs...)
}
