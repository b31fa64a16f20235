package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docker runs the container CLI (docker, or $QS_DOCKER) and returns its
// combined output.
func docker(args ...string) (string, error) {
	bin := os.Getenv("QS_DOCKER")
	if bin == "" {
		bin = "docker"
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestStaticImageRuns builds the image of deploy/container/
// Containerfile.static (a static qs on an empty base, nothing to pull),
// runs it with no network but its loopback, and checks `qs version` and a
// put then a get inside it. It needs a running container daemon.
func TestStaticImageRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a container image")
	}
	if out, err := docker("info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no container daemon reachable (start dockerd, or set DOCKER_HOST; QS_DOCKER names another CLI): %v %s", err, out)
	}
	ctx := t.TempDir()
	src, err := os.ReadFile(filepath.Join(deployDir, "container", "Containerfile.static"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "Containerfile.static"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"rootfs/usr/local/bin", "rootfs/var/lib/qs"} {
		if err := os.MkdirAll(filepath.Join(ctx, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(ctx, "rootfs/usr/local/bin/qs"), "../cmd/qs")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	tag := fmt.Sprintf("qs-test:%d", time.Now().UnixNano())
	if out, err := docker("build", "-q", "-f", filepath.Join(ctx, "Containerfile.static"), "-t", tag, ctx); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { docker("rmi", "-f", tag) })

	if out, err := docker("run", "--rm", "--network", "none", tag, "version"); err != nil || !strings.HasPrefix(out, "qs ") {
		t.Fatalf("qs version in the image: %q %v", out, err)
	}

	// The default command listens beyond loopback: it needs the cluster
	// key, readable by the image's user.
	etc := t.TempDir()
	if out, code := runQS(t, "cert", "key", "--out", filepath.Join(etc, "cluster.key")); code != 0 {
		t.Fatalf("qs cert key: %s", out)
	}
	for _, p := range []string{etc, filepath.Join(etc, "cluster.key")} {
		if err := os.Chown(p, 10001, 10001); err != nil {
			t.Skipf("cannot give the key to the image's user (uid 10001): %v", err)
		}
	}
	name := strings.ReplaceAll(strings.ReplaceAll(tag, ":", "-"), "qs-test", "qs-run")
	if out, err := docker("run", "-d", "--name", name, "--network", "none", "-v", etc+":/etc/qs:ro", tag); err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	t.Cleanup(func() { docker("rm", "-f", name) })
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := docker("exec", name, "/usr/local/bin/qs", "put", "--addr", "127.0.0.1:7380", "greeting", "hello")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := docker("logs", name)
			t.Fatalf("put in the container: %v %s\nserver output:\n%s", err, out, logs)
		}
	}
	if out, err := docker("exec", name, "/usr/local/bin/qs", "get", "--addr", "127.0.0.1:7380", "greeting"); err != nil || out != "hello" {
		t.Fatalf("get in the container: %q %v", out, err)
	}
}
