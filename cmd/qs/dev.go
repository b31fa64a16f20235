package main

import (
	"flag"
	"fmt"
	"os"
)

func init() {
	register("dev", "try Quicksilver locally: a root with data in ./qs-dev and a short guide", cmdDev)
}

// cmdDev runs a local root for trying Quicksilver out. The replication tree
// (intermediates, leaves, a proxy) joins it once replication exists; until
// then it is one node. Ctrl-C stops it; the data directory is kept.
func cmdDev(args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	data := fs.String("data", "./qs-dev", "data directory (kept after exit)")
	httpAddr := fs.String("http", "127.0.0.1:7380", "HTTP API address")
	mcAddr := fs.String("memcache", "127.0.0.1:7311", "memcached protocol address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, `Quicksilver dev: one root node, data in %s (kept when you stop).
Try, in another terminal:
  go run ./cmd/qs put --addr %s greeting hello
  go run ./cmd/qs get --addr %s greeting
  curl -s http://%s/v1/default/status
  printf 'get greeting\r\n' | nc %s
Metrics: http://%s/metrics    Stop: Ctrl-C

`, *data, *httpAddr, *httpAddr, *httpAddr, hostPortSpace(*mcAddr), *httpAddr)
	return cmdServe([]string{"--data", *data, "--http", *httpAddr, "--memcache", *mcAddr})
}

func hostPortSpace(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i] + " " + addr[i+1:]
		}
	}
	return addr
}
