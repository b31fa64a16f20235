// Package client is the Go client of the Quicksilver HTTP API. The qs CLI
// uses it. Reads fail over across the configured servers; writes go to the
// first server that accepts them (moving on from a server that says it is
// not the root) and are retried safely: every write carries an
// Idempotency-Key, kept across its retries, so a write whose answer was
// lost (a timeout, a connection reset, a 503) is applied once even when
// it is sent again. Servers are tried in the order given; one that just
// failed at the transport level (refused, reset, no answer within the
// timeout) is tried last for Options.Sideline, so a dead host costs one
// timeout, not one per request.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Client talks to one or more qs servers over HTTP.
type Client struct {
	servers []string // base URLs, "http://host:port"
	// down[i] is when (Unix ns) servers[i] last failed at the transport
	// level (refused, reset, timed out): for the next sideline it is
	// tried after the others, so that a server that accepts connections
	// but never answers costs one timeout, not one per request.
	down     []atomic.Int64
	sideline time.Duration
	db       string
	hc       *http.Client
	retries  int
	backoff  time.Duration
	auth     string // "Bearer <token>", or empty
}

// Options configure a Client.
type Options struct {
	// Database is the database name. Default "default".
	Database string
	// Timeout bounds each request. Default 10s.
	Timeout time.Duration
	// HTTPClient overrides the HTTP client.
	HTTPClient *http.Client
	// WriteAttempts bounds the rounds over the servers a write makes when
	// it fails in a way a retry may fix (connection error, timeout, 503,
	// 504). Default 3; 1 disables retries.
	WriteAttempts int
	// RetryBackoff is the pause before the second round, doubled for each
	// next one. Default 100ms.
	RetryBackoff time.Duration
	// Token is the producer's bearer token, sent with every write (see
	// "Onboarding a producer" in docs/operations.md). Reads need none.
	Token string
	// Sideline is how long a server that failed at the transport level
	// (connection refused or reset, no answer within Timeout) is tried
	// only after the others. Default 5s; negative: never.
	Sideline time.Duration
}

// New returns a client for servers given as host:port or URLs.
func New(servers []string, o Options) (*Client, error) {
	if len(servers) == 0 {
		return nil, errors.New("client: no servers")
	}
	c := &Client{db: o.Database, hc: o.HTTPClient, retries: o.WriteAttempts, backoff: o.RetryBackoff, sideline: o.Sideline}
	if c.sideline == 0 {
		c.sideline = 5 * time.Second
	}
	if c.db == "" {
		c.db = "default"
	}
	if o.Token != "" {
		c.auth = "Bearer " + o.Token
	}
	if c.retries <= 0 {
		c.retries = 3
	}
	if c.backoff <= 0 {
		c.backoff = 100 * time.Millisecond
	}
	if c.hc == nil {
		t := o.Timeout
		if t == 0 {
			t = 10 * time.Second
		}
		c.hc = &http.Client{Timeout: t}
	}
	for _, s := range servers {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		c.servers = append(c.servers, s)
	}
	if len(c.servers) == 0 {
		return nil, errors.New("client: no servers")
	}
	c.down = make([]atomic.Int64, len(c.servers))
	return c, nil
}

// order returns the indexes of the servers in the order to try them: as
// configured, with the servers sidelined by a recent transport failure
// last.
func (c *Client) order() []int {
	out := make([]int, 0, len(c.servers))
	var later []int
	now := time.Now().UnixNano()
	for i := range c.servers {
		if t := c.down[i].Load(); t != 0 && now-t < int64(c.sideline) {
			later = append(later, i)
		} else {
			out = append(out, i)
		}
	}
	return append(out, later...)
}

// note records how servers[i] did: an answer (even an error answer)
// clears its sideline, a transport failure starts one.
func (c *Client) note(ctx context.Context, i int, err error) {
	var e *Error
	switch {
	case err == nil || errors.As(err, &e):
		if c.down[i].Load() != 0 {
			c.down[i].Store(0)
		}
	case ctx.Err() == nil && c.sideline > 0:
		c.down[i].Store(time.Now().UnixNano())
	}
}

// Error is an error answered by a server.
type Error struct {
	Status  int
	Code    string
	Message string
	// AppliedIndex is the server's applied index, when it said.
	AppliedIndex uint64
	// RootHTTP, on not_root, are the HTTP addresses where the database's
	// writes are accepted, when the node that refused knew them.
	RootHTTP []string
}

func (e *Error) Error() string {
	return fmt.Sprintf("qs: %s (%d): %s", e.Code, e.Status, e.Message)
}

// IsNotFound reports whether err says the key does not exist.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound && e.Code == "not_found"
}

// Value is a value read with the indexes it was read at.
type Value struct {
	Value []byte
	// Index is the index of the write that last changed the key.
	Index uint64
	// AppliedIndex is the index the server read at.
	AppliedIndex uint64
}

// ReadOptions tune a read.
type ReadOptions struct {
	// MinIndex makes the server wait until it has applied this index
	// (read-your-writes after a write acknowledged with that index).
	MinIndex uint64
	// Wait bounds that wait on the server. Default: the server's (2s).
	Wait time.Duration
}

func (o ReadOptions) query(q url.Values) {
	if o.MinIndex > 0 {
		q.Set("min_index", strconv.FormatUint(o.MinIndex, 10))
	}
	if o.Wait > 0 {
		q.Set("timeout", o.Wait.String())
	}
}

func (c *Client) keyURL(key string) string {
	return "/v1/" + url.PathEscape(c.db) + "/keys/" + escapeKey(key)
}

// escapeKey path-escapes a key, including the dots that would otherwise
// form "." and ".." path segments (refused by the server).
func escapeKey(key string) string {
	return strings.ReplaceAll(url.PathEscape(key), ".", "%2E")
}

// Get reads one key.
func (c *Client) Get(ctx context.Context, key string, o ReadOptions) (Value, error) {
	q := url.Values{}
	o.query(q)
	var v Value
	err := c.read(ctx, func(base string) error {
		resp, err := c.do(ctx, http.MethodGet, base+c.keyURL(key)+encodeQuery(q), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return decodeError(resp)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		v = Value{Value: body}
		v.Index, _ = strconv.ParseUint(resp.Header.Get("Qs-Index"), 10, 64)
		v.AppliedIndex, _ = strconv.ParseUint(resp.Header.Get("Qs-Applied-Index"), 10, 64)
		return nil
	})
	return v, err
}

// WriteResult is the outcome of a durable write.
type WriteResult struct {
	Index   uint64 `json:"index"`
	Changed bool   `json:"changed"`
	// Duplicate: the server had already applied this write (an earlier
	// attempt whose answer was lost); Index and Changed are from then.
	Duplicate bool `json:"duplicate"`
}

// Put sets key to value. ifIndex, when not nil, is a compare-and-swap
// condition on the key's index (0: the key must not exist).
func (c *Client) Put(ctx context.Context, key string, value []byte, ifIndex *uint64) (WriteResult, error) {
	return c.writeKey(ctx, http.MethodPut, key, value, ifIndex)
}

// Delete removes key.
func (c *Client) Delete(ctx context.Context, key string, ifIndex *uint64) (WriteResult, error) {
	return c.writeKey(ctx, http.MethodDelete, key, nil, ifIndex)
}

func (c *Client) writeKey(ctx context.Context, method, key string, value []byte, ifIndex *uint64) (WriteResult, error) {
	q := url.Values{}
	if ifIndex != nil {
		q.Set("if_index", strconv.FormatUint(*ifIndex, 10))
	}
	var res WriteResult
	err := c.write(ctx, func(base string, h http.Header) error {
		resp, err := c.doHeader(ctx, method, base+c.keyURL(key)+encodeQuery(q), value, h)
		if err != nil {
			return err
		}
		return decodeJSON(resp, &res)
	})
	return res, err
}

// Op is one operation of an atomic batch.
type Op struct {
	Delete bool
	Key    string
	Value  []byte
}

// Cond is a compare-and-swap condition of a batch.
type Cond struct {
	Key   string
	Index uint64
}

// Batch applies ops atomically if every condition holds.
func (c *Client) Batch(ctx context.Context, ops []Op, conds []Cond) (WriteResult, error) {
	type jop struct {
		Op    string  `json:"op"`
		Key   string  `json:"key"`
		Value *string `json:"value,omitempty"`
	}
	type jcond struct {
		Key   string `json:"key"`
		Index uint64 `json:"index"`
	}
	req := struct {
		Ops []jop   `json:"ops"`
		If  []jcond `json:"if,omitempty"`
	}{}
	for _, op := range ops {
		if op.Delete {
			req.Ops = append(req.Ops, jop{Op: "del", Key: op.Key})
			continue
		}
		v := base64.StdEncoding.EncodeToString(op.Value)
		req.Ops = append(req.Ops, jop{Op: "set", Key: op.Key, Value: &v})
	}
	for _, cd := range conds {
		req.If = append(req.If, jcond(cd))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return WriteResult{}, err
	}
	var res WriteResult
	err = c.write(ctx, func(base string, h http.Header) error {
		resp, err := c.doHeader(ctx, http.MethodPost, base+"/v1/"+url.PathEscape(c.db)+"/batch", body, h)
		if err != nil {
			return err
		}
		return decodeJSON(resp, &res)
	})
	return res, err
}

// Item is one key of a scan.
type Item struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
	Index uint64 `json:"index"`
}

// ScanResult is one page of a scan.
type ScanResult struct {
	Index uint64  `json:"index"`
	Items []Item  `json:"items"`
	Next  *string `json:"next,omitempty"`
}

// Scan lists keys with prefix from start (inclusive), at most limit.
func (c *Client) Scan(ctx context.Context, prefix, start string, limit int, o ReadOptions) (ScanResult, error) {
	q := url.Values{}
	q.Set("prefix", prefix)
	if start != "" {
		q.Set("start", start)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	o.query(q)
	var res ScanResult
	err := c.read(ctx, func(base string) error {
		resp, err := c.do(ctx, http.MethodGet, base+"/v1/"+url.PathEscape(c.db)+"/keys"+encodeQuery(q), nil)
		if err != nil {
			return err
		}
		return decodeJSON(resp, &res)
	})
	return res, err
}

// MGetResult holds the values of the keys that exist, read at one index.
type MGetResult struct {
	Index  uint64            `json:"index"`
	Values map[string][]byte `json:"values"`
}

// MGet reads several keys at one index.
func (c *Client) MGet(ctx context.Context, keys []string, o ReadOptions) (MGetResult, error) {
	q := url.Values{}
	o.query(q)
	body, err := json.Marshal(map[string][]string{"keys": keys})
	if err != nil {
		return MGetResult{}, err
	}
	var res MGetResult
	err = c.read(ctx, func(base string) error {
		resp, err := c.do(ctx, http.MethodPost, base+"/v1/"+url.PathEscape(c.db)+"/mget"+encodeQuery(q), body)
		if err != nil {
			return err
		}
		return decodeJSON(resp, &res)
	})
	return res, err
}

// Digest is a summary of a node's whole data at one applied index: two
// nodes of a database with the same SHA256 serve the same keys, values and
// write indexes.
type Digest struct {
	Index  uint64 `json:"index"`
	Keys   int    `json:"keys"`
	SHA256 string `json:"sha256"`
}

// Digest asks the first server that answers for the digest of its data
// (GET /v1/{db}/digest). It reads the whole database on the server: a tool
// for comparing replicas, not for every request.
func (c *Client) Digest(ctx context.Context, o ReadOptions) (Digest, error) {
	q := url.Values{}
	o.query(q)
	var res Digest
	err := c.read(ctx, func(base string) error {
		resp, err := c.do(ctx, http.MethodGet, base+"/v1/"+url.PathEscape(c.db)+"/digest"+encodeQuery(q), nil)
		if err != nil {
			return err
		}
		return decodeJSON(resp, &res)
	})
	return res, err
}

// Status returns the status document of the database on the first server
// that answers.
func (c *Client) Status(ctx context.Context) (map[string]any, error) {
	var res map[string]any
	err := c.read(ctx, func(base string) error {
		resp, err := c.do(ctx, http.MethodGet, base+"/v1/"+url.PathEscape(c.db)+"/status", nil)
		if err != nil {
			return err
		}
		return decodeJSON(resp, &res)
	})
	return res, err
}

// read tries each server in turn (see order) until one answers; an answer
// from a server (even an error such as not found) ends the attempt, a
// transport error or an unavailable server moves on.
func (c *Client) read(ctx context.Context, f func(base string) error) error {
	var errs []error
	for _, i := range c.order() {
		s := c.servers[i]
		err := f(s)
		c.note(ctx, i, err)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", s, err))
	}
	return errors.Join(errs...)
}

// write sends one logical write to the servers in order, with one
// Idempotency-Key for all its attempts: it moves on from a server that
// says it is not the root, and retries (up to WriteAttempts rounds, with
// backoff) when the outcome is unknown or the server was unavailable.
// Any other answer, success or error, is final.
func (c *Client) write(ctx context.Context, f func(base string, h http.Header) error) error {
	var id [16]byte
	rand.Read(id[:])
	h := http.Header{"Idempotency-Key": {hex.EncodeToString(id[:])}}
	if c.auth != "" {
		h["Authorization"] = []string{c.auth}
	}
	var errs []error
	// A server that says it is not the root says so again: it is not
	// asked twice, and the write ends once every server said so.
	notRoot := map[int]bool{}
	pause := c.backoff
	for round := 0; round < c.retries && len(notRoot) < len(c.servers); round++ {
		if round > 0 {
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return errors.Join(append(errs, ctx.Err())...)
			}
			pause *= 2
		}
		for _, i := range c.order() {
			if notRoot[i] {
				continue
			}
			s := c.servers[i]
			err := f(s, h)
			c.note(ctx, i, err)
			var e *Error
			switch {
			case err == nil || ctx.Err() != nil:
				return err
			case errors.As(err, &e) && e.Code == "not_root":
				notRoot[i] = true
			case retryable(err):
			default:
				return err
			}
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout
	}
	return true // transport error
}

func (c *Client) do(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	return c.doHeader(ctx, method, u, body, nil)
}

func (c *Client) doHeader(ctx context.Context, method, u string, body []byte, h http.Header) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	for k, v := range h {
		req.Header[k] = v
	}
	return c.hc.Do(req)
}

func encodeQuery(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func decodeJSON(resp *http.Response, out any) error {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<30)).Decode(out)
}

func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(body))}
	var j struct {
		Error struct {
			Code     string   `json:"code"`
			Message  string   `json:"message"`
			RootHTTP []string `json:"root_http"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &j) == nil && j.Error.Code != "" {
		e.Code, e.Message, e.RootHTTP = j.Error.Code, j.Error.Message, j.Error.RootHTTP
	}
	e.AppliedIndex, _ = strconv.ParseUint(resp.Header.Get("Qs-Applied-Index"), 10, 64)
	return e
}
