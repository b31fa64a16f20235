package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/miekg/dns"
)

// Record is one row of the records table, as the bridge writes it to qs.
type Record struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	TTL     uint32 `json:"ttl"`
	Content string `json:"content"`
}

// schema is the records table: one record per name (the primary key, a
// fully qualified lower-case name with its final dot).
const schema = `CREATE TABLE IF NOT EXISTS records (
	name    text PRIMARY KEY,
	type    text NOT NULL,
	ttl     integer NOT NULL,
	content text NOT NULL
)`

// ParseRecord decodes a record's JSON and turns it into a resource record.
func ParseRecord(value []byte) (dns.RR, error) {
	var r Record
	if err := json.Unmarshal(value, &r); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	if r.Name == "" || r.Type == "" || r.Content == "" {
		return nil, fmt.Errorf("record %q: name, type and content are required", value)
	}
	rr, err := dns.NewRR(fmt.Sprintf("%s %d IN %s %s", dns.Fqdn(r.Name), r.TTL, strings.ToUpper(r.Type), r.Content))
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", r.Name, err)
	}
	if rr == nil {
		return nil, fmt.Errorf("record %s: empty", r.Name)
	}
	return rr, nil
}

// Answer builds the reply to q from the record qs holds for its name
// (nil: no such name). A record of another type than asked gives an empty
// answer (NODATA), except a CNAME, which answers every type.
func Answer(q *dns.Msg, value []byte) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	if value == nil {
		m.Rcode = dns.RcodeNameError
		return m, nil
	}
	rr, err := ParseRecord(value)
	if err != nil {
		m.Rcode = dns.RcodeServerFailure
		return m, err
	}
	qt := q.Question[0].Qtype
	if rt := rr.Header().Rrtype; rt == qt || qt == dns.TypeANY || rt == dns.TypeCNAME {
		m.Answer = append(m.Answer, rr)
	}
	return m, nil
}
