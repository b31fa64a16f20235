package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// A replica whose log forked from its source's — it followed one root,
// and now follows another root of the same database id with another
// history — says "forked", answers /healthz 503 (unhealthy_when_forked),
// applies nothing more; qs repair sets its data aside and at the next
// start it bootstraps from the new source and serves its values.
func TestForkedReplicaRepair(t *testing.T) {
	dir := t.TempDir()
	const dbid = "0123456789abcdef0123456789abcdef"
	rootConf := filepath.Join(dir, "root.toml")
	os.WriteFile(rootConf, []byte(fmt.Sprintf("[[database]]\nname = \"default\"\ndb_id = %q\n", dbid)), 0o600)
	repConf := filepath.Join(dir, "replica.toml")
	os.WriteFile(repConf, []byte("unhealthy_when_forked = true\n"), 0o600)
	ctx := context.Background()

	first := startQS(t, t.TempDir(), "--config", rootConf)
	w, err := first.client(t).Put(ctx, "k", []byte("first root"), nil)
	if err != nil {
		t.Fatal(err)
	}
	repData := t.TempDir()
	rep := startQS(t, repData, "--config", repConf, "--upstream", first.Addr["repl"])
	if v, err := rep.client(t).Get(ctx, "k", client.ReadOptions{MinIndex: w.Index, Wait: 30 * time.Second}); err != nil || string(v.Value) != "first root" {
		t.Fatalf("replica of the first root: %+v %v", v, err)
	}
	rep.stop()
	first.stop()

	second := startQS(t, t.TempDir(), "--config", rootConf)
	for _, v := range []string{"second root", "second root, again"} {
		if w, err = second.client(t).Put(ctx, "k", []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	rep = startQS(t, repData, "--config", repConf, "--upstream", second.Addr["repl"])
	var st signedStatus
	deadline := time.Now().Add(60 * time.Second)
	for st.State != "forked" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if st, err = signedStatusOf(rep); err != nil {
			t.Fatal(err)
		}
	}
	if st.State != "forked" || !strings.Contains(st.LastError, "forked") {
		t.Fatalf("status %+v, want state forked", st)
	}
	if code, body, err := httpGet(rep.Addr["http"], "/healthz"); err != nil || code != 503 || !strings.Contains(body, "forked") {
		t.Fatalf("healthz %d %q %v", code, body, err)
	}
	if code, body, _ := httpGet(rep.Addr["http"], "/metrics"); code != 200 || !strings.Contains(body, `qs_repl_forked{db="default"} 1`) {
		t.Fatalf("metrics without qs_repl_forked 1")
	}

	// qs repair refuses while the server runs, then sets the data aside.
	if out, code := runQS(t, "repair", "--data", repData); code == 0 || !strings.Contains(out, "in use") {
		t.Fatalf("repair of a running node: %d %s", code, out)
	}
	rep.stop()
	out, code := runQS(t, "repair", "--data", repData)
	if code != 0 || !strings.Contains(out, "set aside") {
		t.Fatalf("repair: %d %s", code, out)
	}
	aside, _ := filepath.Glob(filepath.Join(repData, "default.repaired-*"))
	if len(aside) != 1 {
		t.Fatalf("data set aside: %v", aside)
	}
	rep = startQS(t, repData, "--config", repConf, "--upstream", second.Addr["repl"])
	v, err := rep.client(t).Get(ctx, "k", client.ReadOptions{MinIndex: w.Index, Wait: 60 * time.Second})
	if err != nil || string(v.Value) != "second root, again" {
		t.Fatalf("repaired replica: %+v %v", v, err)
	}
	if code, _, err := httpGet(rep.Addr["http"], "/healthz"); err != nil || code != 200 {
		t.Fatalf("healthz after repair %d %v", code, err)
	}
}
