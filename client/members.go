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
