package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// HTTPError is a non-200 answer of the HTTP API.
type HTTPError struct {
	Status int
	Body   string // the start of the body
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("http status %d: %s", e.Status, e.Body)
}

// errBadBatchReply: a 200 answer whose body is not {"index":N} with N > 0.
var errBadBatchReply = errors.New("bench: batch reply is not {\"index\":N} with N > 0")

// errIndexNotIncreasing: a client's batch was acknowledged with an index
// not above that of its previous batch, although it was sent after the
// previous one was acknowledged.
var errIndexNotIncreasing = errors.New("bench: batch index did not increase")

// batchClient posts write batches to POST /v1/{db}/batch. Safe for
// concurrent use; every client of one target shares its Transport.
type batchClient struct {
	hc  *http.Client
	tr  *http.Transport
	url string
}

func newBatchClient(addr, db string, conns int, timeout time.Duration) *batchClient {
	tr := &http.Transport{
		Proxy:               nil, // never leave the given address
		DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
		MaxIdleConns:        2 * conns,
		MaxIdleConnsPerHost: 2 * conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &batchClient{
		hc:  &http.Client{Transport: tr, Timeout: timeout},
		tr:  tr,
		url: "http://" + addr + "/v1/" + db + "/batch",
	}
}

func (b *batchClient) Close() { b.tr.CloseIdleConnections() }

// post sends one batch body and returns the index the server committed
// it at.
func (b *batchClient) post(ctx context.Context, body []byte) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	// Read the whole body so that the connection is reused.
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		const max = 200
		if len(data) > max {
			data = data[:max]
		}
		return 0, &HTTPError{Status: resp.StatusCode, Body: string(bytes.TrimSpace(data))}
	}
	var r struct {
		Index *uint64 `json:"index"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.Index == nil || *r.Index == 0 {
		return 0, fmt.Errorf("%w: %.200q", errBadBatchReply, data)
	}
	return *r.Index, nil
}

// appendBatch appends the JSON body of a batch setting keys[i] to
// values[i]. Keys must need no JSON escaping (bench keys are [a-z0-9-]).
func appendBatch(dst []byte, keys []string, values [][]byte) []byte {
	dst = append(dst, `{"ops":[`...)
	for i := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"op":"set","key":"`...)
		dst = append(dst, keys[i]...)
		dst = append(dst, `","value":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, values[i])
		dst = append(dst, `"}`...)
	}
	return append(dst, "]}"...)
}
