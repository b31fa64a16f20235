// Package statuspage is the page every node serves at GET /: one
// self-contained HTML document (no external assets; it works offline)
// that fetches GET /v1/node every second and draws, per database, the
// node's role and position, its cache tiers when it is a proxy, the
// replication tree below it and a graph of the last minutes.
//
// It also keeps what the page graphs: a History of the applied index,
// lag and cache counters of each database, sampled every few seconds and
// held in memory (a fixed ring; nothing is written to disk).
package statuspage
