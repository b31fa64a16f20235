package httpapi

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
)

// TestDigest: the endpoint reports store.Digest, changes with the data,
// waits for min_index and refuses bad parameters.
func TestDigest(t *testing.T) {
	e := newEnv(t, Config{}, store.Options{})
	get := func(path string) (resp, map[string]any) {
		t.Helper()
		r := e.do("GET", path, nil)
		var m map[string]any
		if r.status == http.StatusOK {
			if err := json.Unmarshal(r.body, &m); err != nil {
				t.Fatalf("%s: %v: %s", path, err, r.body)
			}
		}
		return r, m
	}
	e.put("a", "1")
	w := e.put("b", "2")
	r, m := get("/v1/db/digest")
	if r.status != http.StatusOK {
		t.Fatalf("digest: %d %s", r.status, r.body)
	}
	want, err := e.st.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if m["sha256"] != hex.EncodeToString(want.Hash[:]) || m["keys"] != float64(2) || m["index"] != float64(w.Index) {
		t.Fatalf("digest %v, store says %+v", m, want)
	}
	if r.header.Get("Qs-Applied-Index") == "" {
		t.Fatal("no Qs-Applied-Index")
	}

	// Same data, same digest; other data, another digest.
	e.put("b", "2") // no-op
	if _, m2 := get("/v1/db/digest"); m2["sha256"] != m["sha256"] {
		t.Fatalf("no-op write changed the digest: %v vs %v", m2, m)
	}
	e.put("b", "3")
	if _, m3 := get("/v1/db/digest"); m3["sha256"] == m["sha256"] {
		t.Fatal("digest did not change with the data")
	}

	if r, _ := get("/v1/db/digest?min_index=1000&timeout=20ms"); r.status != http.StatusGatewayTimeout {
		t.Fatalf("min_index in the future: %d %s", r.status, r.body)
	}
	for _, bad := range []string{"?min_index=x", "?timeout=-1s", "?bogus=1"} {
		if r, _ := get("/v1/db/digest" + bad); r.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", bad, r.status, r.body)
		}
	}
	if r, _ := get("/v1/nope/digest"); r.status != http.StatusNotFound {
		t.Fatalf("unknown db: %d", r.status)
	}
	if r := e.do("POST", "/v1/db/digest", nil); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", r.status)
	}
}
