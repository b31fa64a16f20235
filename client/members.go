package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// Members are the members of a replicated root by id: their Raft addresses.
type Members map[string]string

// AddMember adds a member to the database's replicated root (any member
// takes the request; it is applied through the Raft log). Start the new
// member with --raft-join afterwards. The token must allow the whole
// keyspace (prefix "") when the producer gateway is on.
func (c *Client) AddMember(ctx context.Context, id uint64, raftAddr string) (Members, error) {
	body, err := json.Marshal(map[string]any{"id": id, "addr": raftAddr})
	if err != nil {
		return nil, err
	}
	return c.members(ctx, http.MethodPost, "", body)
}

// RemoveMember removes a member from the database's replicated root.
func (c *Client) RemoveMember(ctx context.Context, id uint64) (Members, error) {
	return c.members(ctx, http.MethodDelete, "/"+strconv.FormatUint(id, 10), nil)
}

func (c *Client) members(ctx context.Context, method, suffix string, body []byte) (Members, error) {
	var out struct {
		Members Members `json:"members"`
	}
	err := c.write(ctx, func(base string, h http.Header) error {
		resp, err := c.doHeader(ctx, method, base+"/v1/"+url.PathEscape(c.db)+"/raft/members"+suffix, body, h)
		if err != nil {
			return err
		}
		return decodeJSON(resp, &out)
	})
	return out.Members, err
}

// Overlay is the gossip overlay as one node sees it (GET /v1/members).
type Overlay struct {
	Self    string          `json:"self"`
	Members []OverlayMember `json:"members"`
	// RelaysPerDC is how many relays each data centre elects, and DCs the
	// outcome: per database and data centre with proxies, its relays and
	// proxies.
	RelaysPerDC int         `json:"relays_per_dc"`
	DCs         []OverlayDC `json:"dcs"`
}

// OverlayDC is one data centre's proxies of one database.
type OverlayDC struct {
	Database string   `json:"database"`
	DC       string   `json:"dc"`
	Relays   []string `json:"relays"`  // names, lowest rank first
	Proxies  []string `json:"proxies"` // every proxy not suspect, relays included
}

// OverlayMember is one live member of the overlay.
type OverlayMember struct {
	Name string `json:"name"`
	Self bool   `json:"self"`
	// Suspect: the answering node depends on it (a relay, peer or
	// nearby replica of a proxy; a replica's source) and it missed that
	// node's last direct probes. Always false for the other members.
	Suspect bool   `json:"suspect"`
	Gossip  string `json:"gossip"`
	DC      string `json:"dc"`
	HTTP    string `json:"http"`
	Repl    string `json:"repl"`
	// RTTSeconds is the estimated round trip from the answering node;
	// nil while it has no estimate.
	RTTSeconds *float64 `json:"rtt_seconds"`
	Databases  []struct {
		Name         string  `json:"name"`
		DBID         string  `json:"db_id"`
		Role         string  `json:"role"`
		AppliedIndex uint64  `json:"applied_index"`
		Depth        int     `json:"depth"`
		Children     int     `json:"children"`
		MaxChildren  int     `json:"max_children"`
		Parent       *string `json:"parent"` // nil at a root or a detached replica
	} `json:"databases"`
}

// Overlay lists the gossip overlay with estimated round trips, as the
// first server that answers sees it.
func (c *Client) Overlay(ctx context.Context) (*Overlay, error) {
	var out Overlay
	err := c.read(ctx, func(base string) error {
		resp, err := c.do(ctx, http.MethodGet, base+"/v1/members", nil)
		if err != nil {
			return err
		}
		return decodeJSON(resp, &out)
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}
