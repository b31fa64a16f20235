// Package pgtest runs a throwaway PostgreSQL cluster for tests and
// benchmarks: initdb and pg_ctl from the installed PostgreSQL, on
// 127.0.0.1 with a kernel-chosen free port, in a given directory, with
// wal_level=logical (or another level). As root it runs the server as the
// postgres user (runuser), which also owns the directory.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres says no PostgreSQL server binaries were found.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL binaries (initdb, pg_ctl): install PostgreSQL (Debian: postgresql) to run these tests")

// Cluster is a running PostgreSQL cluster.
type Cluster struct {
	Port   int
	dir    string
	bin    string
	asUser string // run commands through runuser as this user; empty: as ourselves
	opts   string
}

// BinDir finds the PostgreSQL server binaries: pg_config --bindir, else
// the newest /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", ErrNoPostgres
}

// Start creates a cluster in dir (which must not hold one) and starts it.
// walLevel is "logical" for the bridge, or another level to test refusals.
func Start(dir, walLevel string) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		c.asUser = "postgres"
		if err := chownTree(dir, "postgres"); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := c.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	c.opts = fmt.Sprintf("-c wal_level=%s -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c max_replication_slots=32 -c max_wal_senders=32 -c fsync=off -c wal_sender_timeout=10s", walLevel, dir)
	for attempt := 0; ; attempt++ {
		if c.Port, err = freePort(); err != nil {
			return nil, err
		}
		if err = c.start(); err == nil {
			return c, nil
		}
		if attempt == 3 {
			return nil, err
		}
	}
}

func (c *Cluster) start() error {
	data := filepath.Join(c.dir, "data")
	out, err := c.run("pg_ctl", "-D", data, "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60",
		"-o", c.opts+" -c port="+strconv.Itoa(c.Port), "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return nil
}

// Stop stops the cluster (fast shutdown).
func (c *Cluster) Stop() error {
	out, err := c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "fast", "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Crash stops the cluster the way a crash would (immediate shutdown: no
// checkpoint, recovery at the next start) and starts it again on the same
// port.
func (c *Cluster) Crash() error {
	out, err := c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %v\n%s", err, out)
	}
	return c.start()
}

// DSN is the connection string of database db as user.
func (c *Cluster) DSN(db, user string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, c.Port, db)
}

// CreateDB creates database name (for one test to use alone) and returns
// its DSN as the superuser postgres.
func (c *Cluster) CreateDB(ctx context.Context, name string) (string, error) {
	if err := c.Exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return c.DSN(name, "postgres"), nil
}

// Exec runs SQL statements in database db as postgres.
func (c *Cluster) Exec(ctx context.Context, db string, sql ...string) error {
	conn, err := pgx.Connect(ctx, c.DSN(db, "postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, s := range sql {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", c.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = c.dir
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

func chownTree(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("pgtest: running as root needs the %s user: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// The server must reach dir: its parents need search permission.
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o001)
		}
	}
	return os.Chown(dir, uid, gid)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
