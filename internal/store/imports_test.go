package store

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The store counts in plain atomics and knows nothing of how its metrics
// are exported: neither it nor a package of this module it depends on
// imports Prometheus (the storage engine's own dependency on it aside).
// Checked with and without cgo, over the non-test files.
func TestStoreDoesNotImportPrometheus(t *testing.T) {
	t.Parallel()
	const module = "github.com/quicksilver-kv/qs"
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !strings.Contains(string(b), "module "+module+"\n") {
		t.Fatalf("module root not at %s: %v", root, err)
	}
	for _, cgo := range []bool{false, true} {
		ctx := build.Default
		ctx.CgoEnabled = cgo
		seen := map[string]bool{}
		var visit func(path, from string)
		visit = func(path, from string) {
			if seen[path] {
				return
			}
			seen[path] = true
			p, err := ctx.ImportDir(filepath.Join(root, strings.TrimPrefix(path, module)), 0)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, imp := range p.Imports {
				switch {
				case strings.HasPrefix(imp, "github.com/prometheus/"):
					t.Errorf("cgo=%v: %s imports %s (reached from %s)", cgo, path, imp, from)
				case strings.HasPrefix(imp, module+"/"):
					visit(imp, path)
				}
			}
		}
		visit(module+"/internal/store", "")
		if len(seen) < 2 {
			t.Fatalf("cgo=%v: %d packages visited: the walk found nothing", cgo, len(seen))
		}
	}
}
