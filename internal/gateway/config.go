package gateway

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// File is the producers file (TOML):
//
//	max_wait = "1s"            # optional
//
//	[[producer]]
//	name = "dns"
//	tokens = ["sha256:<64 hex digits>"]
//	databases = ["default"]    # optional; empty: every database
//	prefixes = ["dns/", "zones/"]
//	ops_per_second = 200       # optional; 0: no limit
//	ops_burst = 400            # optional
//	bytes_per_second = 1048576 # optional; 0: no limit
//	bytes_burst = 4194304      # optional
type File struct {
	// MaxWait is how long a write beyond its producer's quota is held back
	// before it is refused with 429: a write that the token buckets would
	// admit within MaxWait waits and then proceeds. Default 1s; "0s"
	// refuses at once.
	MaxWait *time.Duration `toml:"max_wait"`
	// Producers are the writers allowed on this node.
	Producers []ProducerConfig `toml:"producer"`
}

// ProducerConfig is one [[producer]] of the file.
type ProducerConfig struct {
	// Name identifies the producer in metrics, logs and usage:
	// [a-zA-Z0-9_.-]{1,64}, unique.
	Name string `toml:"name"`
	// Tokens are the hashes of the producer's bearer tokens,
	// "sha256:" + 64 lowercase hex digits of SHA-256(token). Several allow
	// a rotation without downtime. At least one; each unique in the file.
	Tokens []string `toml:"tokens"`
	// Databases the producer may write. Empty: every database.
	Databases []string `toml:"databases"`
	// Prefixes of the keys the producer may write (byte prefixes: "dns"
	// also allows "dnsx"; end them with a separator). "" allows every key.
	// At least one.
	Prefixes []string `toml:"prefixes"`
	// OpsPerSecond is the rate of operations (each op of a batch counts)
	// the producer's token bucket refills at. 0: no limit.
	OpsPerSecond float64 `toml:"ops_per_second"`
	// OpsBurst is the bucket's size: the most ops admitted at once, and so
	// the largest batch admitted. Default: one second's worth, at least 1.
	OpsBurst int `toml:"ops_burst"`
	// BytesPerSecond is the rate of key and value bytes. 0: no limit.
	BytesPerSecond float64 `toml:"bytes_per_second"`
	// BytesBurst is the bucket's size in bytes, and so the largest write
	// admitted. Default: one second's worth, at least 1.
	BytesBurst int `toml:"bytes_burst"`
}

// DefaultMaxWait is the default of File.MaxWait.
const DefaultMaxWait = time.Second

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

// tokenHashPrefix starts every token hash in the file: the algorithm is
// part of the value so that another one can be added later.
const tokenHashPrefix = "sha256:"

// ParseFile decodes a producers file, refusing unknown keys, and applies
// the defaults. Validate it next.
func ParseFile(b []byte, name string) (*File, error) {
	f := &File{}
	md, err := toml.Decode(string(b), f)
	if err != nil {
		return nil, fmt.Errorf("producers file %s: %w", name, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("producers file %s: unknown keys %v", name, und)
	}
	f.EnsureDefaults()
	return f, nil
}

// EnsureDefaults fills unset fields with their defaults.
func (f *File) EnsureDefaults() {
	if f.MaxWait == nil {
		d := DefaultMaxWait
		f.MaxWait = &d
	}
	for i := range f.Producers {
		p := &f.Producers[i]
		if p.OpsBurst == 0 && p.OpsPerSecond > 0 {
			p.OpsBurst = secondsWorth(p.OpsPerSecond)
		}
		if p.BytesBurst == 0 && p.BytesPerSecond > 0 {
			p.BytesBurst = secondsWorth(p.BytesPerSecond)
		}
	}
}

func secondsWorth(rate float64) int {
	return int(max(1, min(math.Ceil(rate), math.MaxInt32)))
}

// Validate reports every problem of the file at once. databases, when not
// nil, are the databases served: a producer naming another is an error.
func (f *File) Validate(databases []string) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.MaxWait != nil && *f.MaxWait < 0 {
		add("max_wait %v must not be negative", *f.MaxWait)
	}
	names := map[string]bool{}
	hashes := map[string]string{}
	for i, p := range f.Producers {
		where := fmt.Sprintf("producer[%d] %q", i, p.Name)
		if !nameRE.MatchString(p.Name) {
			add("%s: name must match %s", where, nameRE)
		}
		if names[p.Name] {
			add("%s: duplicate name", where)
		}
		names[p.Name] = true
		if len(p.Tokens) == 0 {
			add("%s: no tokens (generate one with qs token)", where)
		}
		for _, t := range p.Tokens {
			if _, err := parseTokenHash(t); err != nil {
				add("%s: %v", where, err)
				continue
			}
			if other, ok := hashes[t]; ok {
				add("%s: token %s… is also a token of %q", where, t[:len(tokenHashPrefix)+8], other)
			}
			hashes[t] = p.Name
		}
		if len(p.Prefixes) == 0 {
			add(`%s: no prefixes (use "" to allow every key)`, where)
		}
		if databases != nil {
			for _, d := range p.Databases {
				if !slices.Contains(databases, d) {
					add("%s: database %q is not served by this process", where, d)
				}
			}
		}
		if p.OpsPerSecond < 0 || math.IsNaN(p.OpsPerSecond) || math.IsInf(p.OpsPerSecond, 0) {
			add("%s: ops_per_second %v must be a number ≥ 0", where, p.OpsPerSecond)
		}
		if p.BytesPerSecond < 0 || math.IsNaN(p.BytesPerSecond) || math.IsInf(p.BytesPerSecond, 0) {
			add("%s: bytes_per_second %v must be a number ≥ 0", where, p.BytesPerSecond)
		}
		if p.OpsBurst < 0 || (p.OpsBurst == 0 && p.OpsPerSecond > 0) {
			add("%s: ops_burst %d must be at least 1", where, p.OpsBurst)
		}
		if p.BytesBurst < 0 || (p.BytesBurst == 0 && p.BytesPerSecond > 0) {
			add("%s: bytes_burst %d must be at least 1", where, p.BytesBurst)
		}
	}
	return errors.Join(errs...)
}

// parseTokenHash decodes "sha256:<64 hex>".
func parseTokenHash(s string) ([32]byte, error) {
	var h [32]byte
	hexPart, ok := strings.CutPrefix(s, tokenHashPrefix)
	if !ok || len(hexPart) != 64 || strings.ToLower(hexPart) != hexPart {
		return h, fmt.Errorf("token %.16q…: want %q and 64 lowercase hex digits (see qs token)", s, tokenHashPrefix)
	}
	if _, err := hex.Decode(h[:], []byte(hexPart)); err != nil {
		return h, fmt.Errorf("token %.16q…: %v", s, err)
	}
	return h, nil
}

// Options configure a Gateway.
type Options struct {
	// Path is the producers file. Required.
	Path string
	// Databases are the databases served; the file may name no other.
	// Nil: not checked.
	Databases []string
	// PollInterval is how often Run reads the file and reloads it when its
	// content changed. Default 2s.
	PollInterval time.Duration
	// Logger receives reloads and their failures. Default slog.Default().
	Logger *slog.Logger
	// Metrics counts admissions, refusals and reloads. Nil: a private
	// NewMetrics (registered nowhere).
	Metrics *Metrics
}

// DefaultPollInterval is the default of Options.PollInterval.
const DefaultPollInterval = 2 * time.Second

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports options a Gateway cannot work with.
func (o *Options) Validate() error {
	var errs []error
	if o.Path == "" {
		errs = append(errs, errors.New("gateway: no producers file"))
	}
	if o.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("gateway: poll interval %v must be positive", o.PollInterval))
	}
	return errors.Join(errs...)
}
