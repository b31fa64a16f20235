package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// signedStatus is the part of a replica's status about signed heads.
type signedStatus struct {
	State       string `json:"state"`
	SignedIndex uint64 `json:"signed_index"`
	LastError   string `json:"last_error"`
}

func signedStatusOf(p *proc) (signedStatus, error) {
	var st signedStatus
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + p.Addr["http"] + "/v1/default/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// keyConfig writes a configuration file naming the given key files.
func keyConfig(t *testing.T, dir, name, signing, public string) string {
	t.Helper()
	var b strings.Builder
	if signing != "" {
		fmt.Fprintf(&b, "root_signing_key = %q\n", signing)
	}
	if public != "" {
		fmt.Fprintf(&b, "root_public_key = %q\n", public)
	}
	p := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A root signs its log with the key qs cert sign-key made; a replica and
// a replica of that replica verify it with the public key and serve the
// writes; a replica given another public key applies nothing and says
// why in its status.
func TestSignedLogHeads(t *testing.T) {
	dir := t.TempDir()
	if out, code := runQS(t, "cert", "sign-key", "--out", filepath.Join(dir, "keys")); code != 0 {
		t.Fatalf("qs cert sign-key: %d %s", code, out)
	}
	if out, code := runQS(t, "cert", "sign-key", "--out", filepath.Join(dir, "other")); code != 0 {
		t.Fatalf("qs cert sign-key: %d %s", code, out)
	}
	priv, pub := filepath.Join(dir, "keys", "root-signing.key"), filepath.Join(dir, "keys", "root-public.pem")
	if fi, err := os.Stat(priv); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("signing key file: %v %v", fi, err)
	}
	root := startQS(t, t.TempDir(), "--config", keyConfig(t, dir, "root", priv, pub))
	w, err := root.client(t).Put(context.Background(), "k", []byte("v1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	mid := startQS(t, t.TempDir(), "--config", keyConfig(t, dir, "mid", "", pub), "--upstream", root.Addr["repl"])
	leaf := startQS(t, t.TempDir(), "--config", keyConfig(t, dir, "leaf", "", pub), "--upstream", mid.Addr["repl"])
	for _, p := range []*proc{mid, leaf} {
		v, err := p.client(t).Get(context.Background(), "k", client.ReadOptions{MinIndex: w.Index, Wait: 30 * time.Second})
		if err != nil || string(v.Value) != "v1" {
			t.Fatalf("replica: %+v %v", v, err)
		}
		var st signedStatus
		deadline := time.Now().Add(30 * time.Second)
		for st.SignedIndex < w.Index && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			if st, err = signedStatusOf(p); err != nil {
				t.Fatal(err)
			}
		}
		if st.SignedIndex < w.Index {
			t.Fatalf("status %+v: signed_index below %d", st, w.Index)
		}
	}

	wrong := startQS(t, t.TempDir(), "--config", keyConfig(t, dir, "wrong", "", filepath.Join(dir, "other", "root-public.pem")),
		"--upstream", root.Addr["repl"])
	var st signedStatus
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(st.LastError, "signature") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if st, err = signedStatusOf(wrong); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(st.LastError, "signature") || st.SignedIndex != 0 {
		t.Fatalf("replica with another public key: %+v", st)
	}
	if _, err := wrong.client(t).Get(context.Background(), "k", client.ReadOptions{}); err == nil {
		t.Fatal("replica with another public key serves k")
	}

	// A signing key whose public half is not the configured public key
	// is refused at start.
	out, code := runQSTimeout(t, 30*time.Second, "serve", "--data", t.TempDir(), "--http", "127.0.0.1:0", "--memcache", "127.0.0.1:0",
		"--repl", "127.0.0.1:0", "--config", keyConfig(t, dir, "mismatch", priv, filepath.Join(dir, "other", "root-public.pem")))
	if code == 0 || !strings.Contains(out, "root_public_key is not the public half") {
		t.Fatalf("mismatched keys: %d %s", code, out)
	}
}

// A new leaf with the public key, whose only source is a replica, must
// bootstrap: it installs the root's sealed snapshot, relayed by the
// replica, and serves the root's values.
func TestSealedBootstrapThroughReplica(t *testing.T) {
	dir := t.TempDir()
	if out, code := runQS(t, "cert", "sign-key", "--out", filepath.Join(dir, "keys")); code != 0 {
		t.Fatalf("qs cert sign-key: %d %s", code, out)
	}
	priv, pub := filepath.Join(dir, "keys", "root-signing.key"), filepath.Join(dir, "keys", "root-public.pem")
	rootDir := t.TempDir()
	root := startQS(t, rootDir, "--config", writeConfig(t, rootDir, fmt.Sprintf(
		"root_signing_key = %q\nroot_public_key = %q\nbootstrap_rate = -1\n[[database]]\nname = \"default\"\nretain_entries = 5\n", priv, pub)))
	rc := root.client(t)
	ctx := context.Background()
	if _, err := rc.Put(ctx, "k", []byte("the root's value"), nil); err != nil {
		t.Fatal(err)
	}
	last := fillKeys(t, rc, "f", 4000, 200) // far more entries than the root retains

	replica := func(upstream string) *proc {
		d := t.TempDir()
		cfg := writeConfig(t, d, fmt.Sprintf("root_public_key = %q\nbootstrap_lock = %q\n", pub, filepath.Join(d, "bootstrap.lock")))
		return startQS(t, d, "--config", cfg, "--upstream", upstream)
	}
	mid := replica(root.Addr["repl"])
	if _, err := mid.client(t).Get(ctx, "k", client.ReadOptions{MinIndex: last.Index, Wait: 60 * time.Second}); err != nil {
		t.Fatalf("mid did not catch up: %v\n%s", err, mid.out.String())
	}
	awaitMetric(t, mid, `qs_repl_bootstraps_total{db="default",result="installed"}`, 1) // the root's log is truncated
	leaf := replica(mid.Addr["repl"])
	v, err := leaf.client(t).Get(ctx, "k", client.ReadOptions{MinIndex: last.Index, Wait: 60 * time.Second})
	if err != nil || string(v.Value) != "the root's value" {
		t.Fatalf("leaf: %+v %v\n%s", v, err, leaf.out.String())
	}
	awaitMetric(t, leaf, `qs_repl_bootstraps_total{db="default",result="installed"}`, 1)
	awaitMetric(t, mid, `qs_repl_snapshot_transfers_total{result="relayed"}`, 1)
}

// awaitMetric waits (60 s at most) until p's metric sample reaches want.
func awaitMetric(t *testing.T, p *proc, sample string, want float64) {
	t.Helper()
	var got float64
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		if got, err = scrapeMetric(p.Addr["http"], sample); err == nil && got >= want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s stayed at %v, want %v\n%s", sample, got, want, p.out.String())
}
