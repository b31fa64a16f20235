package main

import (
	"flag"
	"fmt"
	"sort"
	"strconv"

	"github.com/quicksilver-kv/qs/client"
)

func init() {
	register("raft", "change a replicated root's members: qs raft add ID HOST:PORT | qs raft remove ID | qs raft members", cmdRaft)
}

// cmdRaft changes or lists the members of a replicated (Raft) root; see
// "Running an HA root" in docs/operations.md.
func cmdRaft(args []string) error {
	usage := "usage: qs raft [--addr A] add ID RAFT_ADDR | remove ID | members"
	fs := flag.NewFlagSet("raft", flag.ContinueOnError)
	cf := newClientFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usageErrorf("%s", usage)
	}
	c, ctx, cancel, err := cf.client()
	if err != nil {
		return err
	}
	defer cancel()
	var m client.Members
	switch {
	case rest[0] == "add" && len(rest) == 3:
		id, err := strconv.ParseUint(rest[1], 10, 64)
		if err != nil || id == 0 {
			return fmt.Errorf("member id %q: want a number ≥ 1", rest[1])
		}
		m, err = c.AddMember(ctx, id, rest[2])
		if err != nil {
			return err
		}
	case rest[0] == "remove" && len(rest) == 2:
		id, err := strconv.ParseUint(rest[1], 10, 64)
		if err != nil || id == 0 {
			return fmt.Errorf("member id %q: want a number ≥ 1", rest[1])
		}
		if m, err = c.RemoveMember(ctx, id); err != nil {
			return err
		}
	case rest[0] == "members" && len(rest) == 1:
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		raw, _ := st["members"].(map[string]any)
		if raw == nil {
			return fmt.Errorf("database %s is not a replicated root", *cf.db)
		}
		m = client.Members{}
		for k, v := range raw {
			m[k], _ = v.(string)
		}
		if r, ok := st["raft"].(map[string]any); ok {
			fmt.Printf("leader %v term %v commit %v applied %v\n", r["leader"], r["term"], r["commit_index"], r["applied_index"])
		}
	default:
		return usageErrorf("%s", usage)
	}
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { a, _ := strconv.Atoi(ids[i]); b, _ := strconv.Atoi(ids[j]); return a < b })
	for _, id := range ids {
		fmt.Printf("%s=%s\n", id, m[id])
	}
	return nil
}
