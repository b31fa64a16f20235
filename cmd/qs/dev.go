package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func init() {
	register("dev", "start a local tree (root, 2 intermediates, 4 leaves, a proxy, a data centre of a relay and 3 proxies) on loopback and show each node's index and lag; --ha: a 3-member Raft root", cmdDev)
}

// devNode is one qs serve child process of the dev tree.
type devNode struct {
	name     string
	upstream []string // names of its sources, in order
	replicas []string // proxy: names of the replicas it fetches from
	// relay: the proxy is the relay of its data centre (dc); relays: a
	// proxy of a data centre fetches through these relays (names).
	relay  bool
	relays []string
	dc     string
	// gossip: the node joins the overlay (a replica: through the first
	// node, and finds its source itself).
	gossip bool
	// listeners it announces: http, memcache, repl (and raft for an HA
	// root member).
	listeners int
	cmd       *exec.Cmd
	addr      map[string]string
	done      chan struct{}
}

var devAnnounce = regexp.MustCompile(`^(\w+) listening on (\S+)`)

// cmdDev runs a local replication tree: the root takes writes on the
// well-known ports, intermediates replicate from it, leaves from an
// intermediate (the other intermediate and the root as fall-backs), and a
// proxy follows an intermediate and fetches what it does not keep from
// two leaves. Beside the tree runs a data centre (devDC): a relay that
// fetches from two leaves and proxies, each owning a shard of the data
// centre, that fetch through it and take its prefetch stream. Every node
// is a real `qs serve` process with its
// data under --data; Ctrl-C stops them all and keeps the data.
func cmdDev(args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	data := fs.String("data", "./qs-dev", "data directory, one subdirectory per node (kept after exit)")
	httpAddr := fs.String("http", "127.0.0.1:7380", "HTTP address of the root")
	mcAddr := fs.String("memcache", "127.0.0.1:7311", "memcached address of the root")
	replAddr := fs.String("repl", "127.0.0.1:7390", "replication address of the root")
	every := fs.Duration("every", 2*time.Second, "how often to print the nodes' state")
	ha := fs.Bool("ha", false, "run the root as a 3-member replicated (Raft) root: root1 (on the addresses above), root2, root3")
	raftBase := fs.Int("raft-port", 7401, "with --ha: Raft ports of root1..root3 on 127.0.0.1 (this one and the next two)")
	gossipN := fs.Int("replicas", 0, "instead of the fixed tree: a root and this many replicas that find their place through the gossip overlay (at most 4 children each)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Ctrl-C, a closed terminal (SIGHUP) and a reader gone (SIGPIPE, as
	// in qs dev | head) stop the tree, from the first node on: a signal
	// that arrived before this was set up would be lost when it is
	// ignored (nohup), and the tree would run on. If qs dev is killed,
	// each child gets SIGTERM from the kernel (Pdeathsig, see start).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	defer stop()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if n, err := stopStaleTree(*data, 15*time.Second); err != nil {
		return fmt.Errorf("stop the tree a previous qs dev left in %s: %w", *data, err)
	} else if n > 0 {
		fmt.Printf("stopped %d qs serve %s a previous qs dev left running in %s\n", n, processes(n), *data)
	}
	nodes := []*devNode{
		{name: "root"},
		{name: "mid1", upstream: []string{"root"}},
		{name: "mid2", upstream: []string{"root"}},
		{name: "leaf1", upstream: []string{"mid1", "mid2", "root"}},
		{name: "leaf2", upstream: []string{"mid1", "mid2", "root"}},
		{name: "leaf3", upstream: []string{"mid2", "mid1", "root"}},
		{name: "leaf4", upstream: []string{"mid2", "mid1", "root"}},
		{name: "proxy1", upstream: []string{"mid1", "mid2", "root"}, replicas: []string{"leaf1", "leaf2"}},
	}
	var raftPeers string
	if *ha {
		roots := []string{"root1", "root2", "root3"}
		var peers []string
		for i := range roots {
			peers = append(peers, fmt.Sprintf("%d=127.0.0.1:%d", i+1, *raftBase+i))
		}
		raftPeers = strings.Join(peers, ",")
		nodes = []*devNode{
			{name: "root1"}, {name: "root2"}, {name: "root3"},
			// Intermediates follow any root member; leaves fall back to them.
			{name: "mid1", upstream: roots},
			{name: "mid2", upstream: []string{"root2", "root3", "root1"}},
			{name: "leaf1", upstream: []string{"mid1", "mid2", "root1"}},
			{name: "leaf2", upstream: []string{"mid1", "mid2", "root2"}},
			{name: "leaf3", upstream: []string{"mid2", "mid1", "root3"}},
			{name: "leaf4", upstream: []string{"mid2", "mid1", "root1"}},
			{name: "proxy1", upstream: []string{"mid1", "mid2", "root1"}, replicas: []string{"leaf1", "leaf2"}},
		}
	}
	if *gossipN == 0 {
		root := "root"
		if *ha {
			root = "root1"
		}
		nodes = append(nodes, devDC(root)...)
	}
	if *gossipN > 0 {
		if *ha {
			return errors.New("--replicas and --ha do not go together")
		}
		nodes = []*devNode{{name: "root", gossip: true}}
		for i := range *gossipN {
			nodes = append(nodes, &devNode{name: fmt.Sprintf("r%d", i+1), gossip: true})
		}
	}
	byName := map[string]*devNode{}
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for _, n := range nodes {
		if ctx.Err() != nil {
			fmt.Println("stopping")
			return nil
		}
		a := []string{"serve", "--data", filepath.Join(*data, n.name), "--log-level", "warn", "--ballast-bytes", strconv.Itoa(devBallastBytes),
			"--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0", "--repl", "127.0.0.1:0"}
		if n.name == "root" || n.name == "root1" {
			a = []string{"serve", "--data", filepath.Join(*data, n.name), "--log-level", "warn", "--ballast-bytes", strconv.Itoa(devBallastBytes),
				"--http", *httpAddr, "--memcache", *mcAddr, "--repl", *replAddr}
		}
		if id, ok := strings.CutPrefix(n.name, "root"); ok && *ha {
			i, _ := strconv.Atoi(id)
			a = append(a, "--node-id", id, "--raft", fmt.Sprintf("127.0.0.1:%d", *raftBase+i-1), "--raft-peers", raftPeers)
			n.listeners = 4
		}
		var ups []string
		for _, u := range n.upstream {
			ups = append(ups, byName[u].addr["repl"])
		}
		if len(ups) > 0 {
			a = append(a, "--upstream", ups[0])
			if len(ups) > 1 {
				a = append(a, "--secondary", strings.Join(ups[1:], ","))
			}
		}
		if n.gossip {
			n.listeners = 4
			a = append(a, "--gossip", "127.0.0.1:0", "--node-name", n.name, "--max-children", "4")
			if n.name != "root" {
				a = append(a, "--join", byName["root"].addr["gossip"])
			}
		}
		if len(n.replicas) > 0 {
			var rs []string
			for _, r := range n.replicas {
				rs = append(rs, byName[r].addr["repl"])
			}
			a = append(a, "--role", "proxy", "--replicas", strings.Join(rs, ","), "--cache-bytes", "16777216", "--window", "1000")
		}
		if n.dc != "" {
			a = append(a, "--dc", n.dc, "--node-name", n.name, "--shards", strconv.Itoa(devShards), "--transient-bytes", strconv.Itoa(devTransientBytes))
		}
		if n.relay {
			a = append(a, "--relay")
		}
		if len(n.relays) > 0 {
			var rs []string
			for _, r := range n.relays {
				rs = append(rs, byName[r].addr["repl"])
			}
			a = append(a, "--relays", strings.Join(rs, ","))
		}
		err := n.start(self, a, filepath.Join(*data, n.name+".log"))
		if rerr := recordDevPids(*data, nodes); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("start %s: %w", n.name, err)
		}
		byName[n.name] = n
		fmt.Printf("%-9s http %-21s memcache %-21s repl %-21s", n.name, n.addr["http"], n.addr["memcache"], n.addr["repl"])
		if len(n.upstream) > 0 {
			fmt.Printf(" from %s", strings.Join(n.upstream, " > "))
		}
		switch {
		case n.relay:
			fmt.Printf(", relay of %s fetching from %s", n.dc, strings.Join(n.replicas, ", "))
		case len(n.relays) > 0:
			fmt.Printf(", proxy of %s fetching through %s", n.dc, strings.Join(n.relays, ", "))
		case len(n.replicas) > 0:
			fmt.Printf(", proxy fetching from %s", strings.Join(n.replicas, ", "))
		}
		fmt.Println()
	}
	rootName := "root"
	if *ha {
		rootName = "root1"
	}
	root := byName[rootName].addr["http"]
	if *gossipN > 0 {
		fmt.Printf(`
The replicas find their sources through the gossip overlay. Write at the root, read anywhere:
  qs put --addr %s greeting hello
  qs members --addr %s
The whole tree in a browser (every node serves its status page at / on its HTTP address):
  http://%s/
Node logs: %s/<node>.log. Ctrl-C stops every node; the data stays in %s.
`, root, root, root, *data, *data)
	} else {
		fmt.Printf(`
Write at the root, read anywhere:
  qs put --addr %s greeting hello
  qs get --addr %s --min-index <index from put> greeting
Read through the proxy (it keeps recent and recently read values, fetches the rest):
  qs get --addr %s --min-index <index from put> greeting
Read in data centre %s, whose proxies fetch through its relay (which alone
asks the leaves) and hold what the relay publishes:
  qs get --addr %s --min-index <index from put> greeting
  qs status --addr %s      (cache: hits, fetches, prefetched, shard)
Status pages of the data centre (GET, JSON; /metrics beside them):
%sThe whole tree in a browser (every node serves its status page at / on its HTTP address):
  http://%s/
Node logs: %s/<node>.log. Ctrl-C stops every node; the data stays in %s.
`, root, byName["leaf4"].addr["http"], byName["proxy1"].addr["http"],
			devDCName, byName[devDCProxy].addr["http"], byName[devDCProxy].addr["http"], devDCStatus(nodes), root, *data, *data)
	}
	if used, err := diskUsage(*data); err == nil {
		fmt.Printf("Disk: %.1f MiB in %s for %d nodes, about 25 MiB a node once written to (the storage engine's\n"+
			"preallocated log, a %d MiB ballast); each line below ends with the total. rm -r %s when done.\n",
			float64(used)/(1<<20), *data, len(nodes), devBallastBytes>>20, *data)
	}
	fmt.Println()

	hc := &http.Client{Timeout: time.Second}
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		var line []string
		for _, n := range nodes {
			select {
			case <-n.done:
				line = append(line, n.name+"=DOWN")
				continue
			default:
			}
			line = append(line, n.name+"="+devState(hc, n.addr["http"]))
		}
		if used, err := diskUsage(*data); err == nil {
			line = append(line, fmt.Sprintf("disk=%.0fMiB", float64(used)/(1<<20)))
		}
		fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), strings.Join(line, "  "))
		select {
		case <-ctx.Done():
			fmt.Println("stopping")
			return nil
		case <-t.C:
		}
	}
}

// The data centre qs dev runs beside its tree.
const (
	devDCName         = "dc1"
	devDCProxy        = "dc1-p1" // the proxy the hints read through
	devShards         = 4
	devTransientBytes = 4 << 20
)

// devDC is the data centre of the dev tree: a relay that fetches from
// leaf3 and leaf4, and 3 proxies that fetch through it, each the owner of
// a shard of the data centre. They follow the intermediates like proxy1.
func devDC(root string) []*devNode {
	ups := []string{"mid2", "mid1", root}
	leaves := []string{"leaf3", "leaf4"}
	nodes := []*devNode{{name: devDCName + "-relay", upstream: ups, replicas: leaves, relay: true, dc: devDCName}}
	for i := range 3 {
		nodes = append(nodes, &devNode{name: fmt.Sprintf("%s-p%d", devDCName, i+1), upstream: ups, replicas: leaves,
			relays: []string{devDCName + "-relay"}, dc: devDCName})
	}
	return nodes
}

// devDCStatus lists the status page of every node of the data centre,
// one per line.
func devDCStatus(nodes []*devNode) string {
	var b strings.Builder
	for _, n := range nodes {
		if n.dc != "" {
			fmt.Fprintf(&b, "  %-9s http://%s/v1/default/status\n", n.name, n.addr["http"])
		}
	}
	return b.String()
}

// devState is "index" for the root ("index*" for the Raft leader) and
// "index/lag" for replicas.
func devState(hc *http.Client, addr string) string {
	resp, err := hc.Get("http://" + addr + "/v1/default/status")
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	var st struct {
		Role string `json:"role"`
		Raft *struct {
			NodeID uint64 `json:"node_id"`
			Leader uint64 `json:"leader"`
		} `json:"raft"`
		Applied uint64   `json:"applied_index"`
		Lag     *float64 `json:"lag_seconds"`
		State   string   `json:"state"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return "?"
	}
	if st.Role == "root" {
		if st.Raft != nil && st.Raft.Leader == st.Raft.NodeID {
			return fmt.Sprint(st.Applied, "*")
		}
		return fmt.Sprint(st.Applied)
	}
	lag := "-"
	if st.Lag != nil {
		lag = (time.Duration(*st.Lag * float64(time.Second))).Round(time.Millisecond).String()
	}
	if st.State != "streaming" {
		return fmt.Sprintf("%d/%s(%s)", st.Applied, lag, st.State)
	}
	return fmt.Sprintf("%d/%s", st.Applied, lag)
}

func (n *devNode) start(bin string, args []string, logPath string) error {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stderr = logf
	// Ctrl-C goes to us and we stop the children; if we die without
	// stopping them (SIGKILL), the kernel sends each SIGTERM.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	n.done = make(chan struct{})
	n.addr = map[string]string{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-n.done:
			}
		}
	}()
	go func() {
		n.cmd.Wait()
		logf.Close()
		close(n.done)
	}()
	deadline := time.After(60 * time.Second)
	want := max(n.listeners, 3)
	for len(n.addr) < want {
		select {
		case l := <-lines:
			if m := devAnnounce.FindStringSubmatch(l); m != nil {
				n.addr[m[1]] = m[2]
			}
		case <-n.done:
			return fmt.Errorf("exited early; see %s", logPath)
		case <-deadline:
			return errors.New("no listeners announced within 60s; see " + logPath)
		}
	}
	return nil
}

func (n *devNode) stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.done:
		return
	default:
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(15 * time.Second):
		n.cmd.Process.Kill()
		<-n.done
	}
}
