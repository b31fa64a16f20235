package main

import (
	"encoding/json"
	"testing"

	"github.com/miekg/dns"
)

func TestAnswer(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion("h1.example.com.", dns.TypeA)
	m, err := Answer(q, recordJSON(Record{Name: "h1.example.com.", Type: "A", TTL: 300, Content: "10.0.0.1"}))
	if err != nil || !m.Authoritative || len(m.Answer) != 1 || m.Answer[0].String() != "h1.example.com.\t300\tIN\tA\t10.0.0.1" {
		t.Fatalf("A: %v %v", m, err)
	}
	// Absent: NXDOMAIN. Another type: NODATA. A CNAME answers every type.
	if m, _ := Answer(q, nil); m.Rcode != dns.RcodeNameError {
		t.Fatalf("absent: rcode %d", m.Rcode)
	}
	if m, _ := Answer(q, recordJSON(Record{Name: "h1.example.com.", Type: "AAAA", TTL: 1, Content: "::1"})); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Fatalf("other type: %v", m)
	}
	if m, _ := Answer(q, recordJSON(Record{Name: "h1.example.com.", Type: "CNAME", TTL: 1, Content: "h2.example.com."})); len(m.Answer) != 1 {
		t.Fatalf("cname: %v", m)
	}
	// A bad record is a server failure, with an error to log.
	for _, bad := range []string{`nope`, `{"name":"h1.example.com."}`, `{"name":"h1.example.com.","type":"A","ttl":1,"content":"not-an-ip"}`} {
		if m, err := Answer(q, []byte(bad)); err == nil || m.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: rcode %d, err %v", bad, m.Rcode, err)
		}
	}
}

func recordJSON(r Record) []byte {
	b, _ := json.Marshal(r)
	return b
}
