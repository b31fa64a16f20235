package httpapi

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the limits of the HTTP API. A zero field means "use the
// default"; DefaultConfig returns every default, EnsureDefaults fills zero
// fields and Validate rejects values the handler cannot work with.
type Config struct {
	// MaxBodyBytes is the largest request body read (PUT values, batch and
	// mget documents). A larger body is answered 413 too_large without
	// being read to the end. Default 64 MiB.
	MaxBodyBytes int64
	// MaxMgetKeys is the most keys one mget may name; more is answered 413
	// too_large. Default 10000.
	MaxMgetKeys int
	// MaxScanLimit is the largest page a scan returns; a larger limit
	// parameter is lowered to it. Default 10000.
	MaxScanLimit int
	// DefaultScanLimit is the page size of a scan without a limit
	// parameter. Default 1000; at most MaxScanLimit.
	DefaultScanLimit int
	// MaxResponseBytes bounds the JSON body of scan and mget replies (built
	// whole up to 1 MiB, streamed beyond; an error part way cuts the
	// connection). A scan page ends early (with "next") once it reaches this size,
	// always holding at least one item; an mget reply that would exceed it
	// is answered 413 too_large. Default 64 MiB.
	MaxResponseBytes int
	// MaxWait caps the timeout parameter of reads with min_index. Default
	// 60 seconds.
	MaxWait time.Duration
	// DefaultWait is how long a read with min_index and no timeout
	// parameter waits for the index to be applied. Default 2 seconds; at
	// most MaxWait.
	DefaultWait time.Duration
	// BodyTimeout bounds receiving a request body: a body not complete in
	// time is answered 408 request_timeout and the connection closed.
	// Default 60 seconds.
	BodyTimeout time.Duration
	// WriteTimeout bounds each 256 KiB of an answer (watch streams
	// excepted): a client that takes none of it for this long is
	// disconnected. Default 30 seconds.
	WriteTimeout time.Duration
	// Metrics counts requests, errors and timings. Nil: a private
	// NewMetrics (registered nowhere) for each handler.
	Metrics *Metrics
}

// DefaultConfig returns the default limits.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:     64 << 20,
		MaxMgetKeys:      10000,
		MaxScanLimit:     10000,
		DefaultScanLimit: 1000,
		MaxResponseBytes: 64 << 20,
		MaxWait:          60 * time.Second,
		DefaultWait:      2 * time.Second,
		BodyTimeout:      60 * time.Second,
		WriteTimeout:     30 * time.Second,
	}
}

// EnsureDefaults sets every zero field to its default.
func (c *Config) EnsureDefaults() {
	d := DefaultConfig()
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.MaxMgetKeys == 0 {
		c.MaxMgetKeys = d.MaxMgetKeys
	}
	if c.MaxScanLimit == 0 {
		c.MaxScanLimit = d.MaxScanLimit
	}
	if c.DefaultScanLimit == 0 {
		c.DefaultScanLimit = min(d.DefaultScanLimit, c.MaxScanLimit)
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = d.MaxResponseBytes
	}
	if c.MaxWait == 0 {
		c.MaxWait = d.MaxWait
	}
	if c.DefaultWait == 0 {
		c.DefaultWait = min(d.DefaultWait, c.MaxWait)
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = d.BodyTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
}

// Validate reports every field the handler cannot work with. It expects
// defaults to have been applied.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("http api config: "+format, args...))
		}
	}
	check(c.MaxBodyBytes >= 1, "MaxBodyBytes %d must be at least 1", c.MaxBodyBytes)
	check(c.MaxMgetKeys >= 1, "MaxMgetKeys %d must be at least 1", c.MaxMgetKeys)
	check(c.MaxScanLimit >= 1, "MaxScanLimit %d must be at least 1", c.MaxScanLimit)
	check(c.DefaultScanLimit >= 1 && c.DefaultScanLimit <= c.MaxScanLimit,
		"DefaultScanLimit %d must be in [1, MaxScanLimit %d]", c.DefaultScanLimit, c.MaxScanLimit)
	check(c.MaxResponseBytes >= 1, "MaxResponseBytes %d must be at least 1", c.MaxResponseBytes)
	check(c.MaxWait > 0, "MaxWait %v must be positive", c.MaxWait)
	check(c.BodyTimeout > 0, "BodyTimeout %v must be positive", c.BodyTimeout)
	check(c.WriteTimeout > 0, "WriteTimeout %v must be positive", c.WriteTimeout)
	check(c.DefaultWait > 0 && c.DefaultWait <= c.MaxWait,
		"DefaultWait %v must be in (0, MaxWait %v]", c.DefaultWait, c.MaxWait)
	return errors.Join(errs...)
}
