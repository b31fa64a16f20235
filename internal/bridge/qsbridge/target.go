package qsbridge

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// head is the target's database id and the head of its log.
type head struct {
	DBID    store.DBID
	Index   uint64
	Hash    wal.Hash
	Bridged bool
}

// target is the HTTP client of the bridged root.
type target struct {
	base  string // http://host:port/v1/DB/bridge
	token string
	hc    *http.Client
}

func newTarget(addr, db, token string, hc *http.Client) *target {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return &target{base: strings.TrimRight(addr, "/") + "/v1/" + url.PathEscape(db) + "/bridge", token: token, hc: hc}
}

// apiError is an error answer of the target.
type apiError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Applied *uint64
}

func (e *apiError) Error() string {
	return fmt.Sprintf("target answered %d %s: %s", e.Status, e.Code, e.Message)
}

// permanent reports whether retrying cannot help: the target is not
// bridged, or the token is refused.
func (e *apiError) permanent() bool {
	switch e.Code {
	case "bad_request", "unauthenticated", "invalid_token", "forbidden", "unknown_database", "not_found", "too_large":
		return true
	}
	return false
}

func (t *target) head(ctx context.Context) (head, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base, nil)
	if err != nil {
		return head{}, err
	}
	return t.do(req)
}

// appendEntries sends one batch; the answer is the target's new head.
func (t *target) appendEntries(ctx context.Context, es []wal.Entry) (head, error) {
	var buf bytes.Buffer
	if err := repl.WriteMessage(&buf, &repl.Entries{Entries: es}); err != nil {
		return head{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base, &buf)
	if err != nil {
		return head{}, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	return t.do(req)
}

func (t *target) do(req *http.Request) (head, error) {
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return head{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return head{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var eb struct {
			Error struct {
				Code         string  `json:"code"`
				Message      string  `json:"message"`
				AppliedIndex *uint64 `json:"applied_index"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &eb) != nil || eb.Error.Code == "" {
			return head{}, &apiError{Status: resp.StatusCode, Code: "http", Message: strings.TrimSpace(string(body))}
		}
		return head{}, &apiError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Applied: eb.Error.AppliedIndex}
	}
	return parseHead(body)
}

// parseHead decodes the answer of GET and POST /v1/{db}/bridge.
func parseHead(body []byte) (head, error) {
	var a struct {
		DBID    string  `json:"db_id"`
		Index   *uint64 `json:"index"`
		Hash    string  `json:"hash"`
		Bridged bool    `json:"bridged"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return head{}, fmt.Errorf("target's bridge answer is not JSON: %w", err)
	}
	id, err := store.ParseDBID(a.DBID)
	if err != nil {
		return head{}, fmt.Errorf("target's bridge answer: db_id: %w", err)
	}
	h, err := hex.DecodeString(a.Hash)
	if err != nil || len(h) != len(wal.Hash{}) || a.Index == nil {
		return head{}, errors.New("target's bridge answer lacks its index or a 64-digit hash")
	}
	out := head{DBID: id, Index: *a.Index, Bridged: a.Bridged}
	copy(out.Hash[:], h)
	return out, nil
}
