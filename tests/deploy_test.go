package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quicksilver-kv/qs/client"
	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
)

// The files under deploy/ are checked here, offline: alert rules and the
// dashboard against the metrics a running tree serves, the Kubernetes
// manifests and their configuration, the systemd units, and the
// container file's build command.

const deployDir = "../deploy"

// alertRules is deploy/prometheus/alerts.yml.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readAlertRules(t *testing.T) alertRules {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var r alertRules
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	return r
}

// dashboardExprs are the PromQL expressions of deploy/grafana/qs.json:
// every panel target and the variable queries.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana", "qs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("qs.json: %v", err)
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	if len(d.Panels) < 6 {
		t.Fatalf("dashboard %q has %d panels", d.Title, len(d.Panels))
	}
	return exprs
}

var metricNameRE = regexp.MustCompile(`\bqs_[a-z0-9_]+\b`)

// TestAlertRulesAndDashboardUseServedMetrics starts a root, a replica, a
// proxy and a one-member HA root, and checks that every metric the alert
// rules and the dashboard name is served by one of them.
func TestAlertRulesAndDashboardUseServedMetrics(t *testing.T) {
	rules := readAlertRules(t)
	want := map[string][]string{} // metric → where it is used
	need := map[string]bool{"replication lag": false, "stalled apply": false, "disk nearly full": false,
		"integrity errors": false, "proxy fetch failures": false, "raft without leader": false}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q in group %q lacks alert, expr, severity or summary", r.Alert, g.Name)
			}
			for _, m := range metricNameRE.FindAllString(r.Expr, -1) {
				want[m] = append(want[m], "alert "+r.Alert)
			}
			for _, c := range []struct{ what, metric string }{
				{"replication lag", "qs_repl_lag_seconds"}, {"stalled apply", "qs_store_applied_index"},
				{"disk nearly full", "qs_store_disk_avail_bytes"}, {"integrity errors", "qs_store_integrity_errors_total"},
				{"proxy fetch failures", "qs_proxy_fetches_total"}, {"raft without leader", "qs_raft_is_leader"},
			} {
				if strings.Contains(r.Expr, c.metric) {
					need[c.what] = true
				}
			}
		}
	}
	for what, ok := range need {
		if !ok {
			t.Errorf("no alert rule for %s", what)
		}
	}
	for _, e := range dashboardExprs(t) {
		for _, m := range metricNameRE.FindAllString(e, -1) {
			want[m] = append(want[m], "dashboard")
		}
	}

	dir := t.TempDir()
	root := startQS(t, filepath.Join(dir, "root"))
	rep := startQS(t, filepath.Join(dir, "replica"), "--upstream", root.Addr["repl"])
	px := startQS(t, filepath.Join(dir, "proxy"), "--upstream", rep.Addr["repl"], "--role", "proxy", "--replicas", rep.Addr["repl"], "--window", "1")
	c := newRaftCluster(t, 1)
	c.startAll()
	ctx := context.Background()
	var last uint64
	for _, k := range []string{"a", "b", "c"} {
		res, err := root.client(t).Put(ctx, k, []byte("value of "+k), nil)
		if err != nil {
			t.Fatal(err)
		}
		last = res.Index
	}
	pc, err := client.New([]string{px.Addr["http"]}, client.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// "a" is out of the proxy's one-entry window: fetched from the replica.
	if v, err := pc.Get(ctx, "a", client.ReadOptions{MinIndex: last}); err != nil || string(v.Value) != "value of a" {
		t.Fatalf("read through the proxy: %+v %v", v, err)
	}
	if _, err := c.client(c.httpAddrs(), 10).Put(ctx, "k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}

	served := map[string]bool{}
	for _, addr := range []string{root.Addr["http"], rep.Addr["http"], px.Addr["http"], c.httpAddrs()[0]} {
		code, body, err := httpGet(addr, "/metrics")
		if err != nil || code != 200 {
			t.Fatalf("GET %s/metrics: %d %v", addr, code, err)
		}
		sc := bufio.NewScanner(strings.NewReader(body))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || line[0] == '#' {
				continue
			}
			name, _, _ := strings.Cut(line, "{")
			name, _, _ = strings.Cut(name, " ")
			served[name] = true
		}
	}
	var missing []string
	for m, uses := range want {
		if !served[m] {
			missing = append(missing, m+" ("+strings.Join(uses, ", ")+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("metrics named by alert rules or the dashboard but served by no node:\n%s", strings.Join(missing, "\n"))
	}
	t.Logf("%d metric names checked", len(want))
}

// TestAlertRulesPassPromtool runs `promtool check rules` when promtool is
// installed (Debian package prometheus).
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found (apt-get install prometheus); the rules' metric names are still checked by TestAlertRulesAndDashboardUseServedMetrics")
	}
	out, err := exec.Command(promtool, "check", "rules", filepath.Join(deployDir, "prometheus", "alerts.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// k8sObject is the part of a Kubernetes object the checks read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas            int               `yaml:"replicas"`
		ServiceName         string            `yaml:"serviceName"`
		PodManagementPolicy string            `yaml:"podManagementPolicy"`
		Selector            map[string]any    `yaml:"selector"`
		ClusterIP           string            `yaml:"clusterIP"`
		Ports               []map[string]any  `yaml:"ports"`
		Template            *k8sPodTemplate   `yaml:"template"`
		MatchLabels         map[string]string `yaml:"matchLabels"`
	} `yaml:"spec"`
}

type k8sPodTemplate struct {
	Metadata struct {
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Containers []struct {
			Name         string   `yaml:"name"`
			Image        string   `yaml:"image"`
			Command      []string `yaml:"command"`
			Args         []string `yaml:"args"`
			VolumeMounts []struct {
				Name      string `yaml:"name"`
				MountPath string `yaml:"mountPath"`
			} `yaml:"volumeMounts"`
		} `yaml:"containers"`
		Volumes []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
			Projected *struct {
				Sources []struct {
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					Secret *struct {
						Name  string `yaml:"name"`
						Items []struct {
							Key  string `yaml:"key"`
							Path string `yaml:"path"`
						} `yaml:"items"`
					} `yaml:"secret"`
				} `yaml:"sources"`
			} `yaml:"projected"`
		} `yaml:"volumes"`
	} `yaml:"spec"`
}

// configFiles returns the directory the pod's container sees the
// ConfigMap's files in and the files a Secret adds there beside them.
func (p *k8sPodTemplate) configFiles(configMap string) (dir string, secretFiles []string) {
	c := p.Spec.Containers[0]
	for _, v := range p.Spec.Volumes {
		var hasMap bool
		var secrets []string
		switch {
		case v.ConfigMap != nil:
			hasMap = v.ConfigMap.Name == configMap
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil && src.ConfigMap.Name == configMap {
					hasMap = true
				}
				if src.Secret != nil {
					for _, it := range src.Secret.Items {
						secrets = append(secrets, it.Path)
					}
				}
			}
		}
		if !hasMap {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				return m.MountPath, secrets
			}
		}
	}
	return "", nil
}

// checkStartsAsShipped fails unless qs serve would open cfg's internal
// ports (replication, Raft) as written: beyond loopback they need a
// cluster key (or mutual TLS), else serve refuses to start. A cluster key
// file named by cfg is made with qs cert key for the check.
func checkStartsAsShipped(t *testing.T, name string, cfg *config.Config) {
	t.Helper()
	var o clusterauth.Options
	if cfg.ClusterKey != "" {
		f := filepath.Join(t.TempDir(), "cluster.key")
		if out, err := exec.Command(qsBin, "cert", "key", "--out", f).CombinedOutput(); err != nil {
			t.Fatalf("qs cert key: %v\n%s", err, out)
		}
		keys, err := clusterauth.LoadKeys(f)
		if err != nil {
			t.Fatal(err)
		}
		o.Key = keys[0]
	}
	if _, err := clusterauth.New(o).CheckListen(cfg.InternalListens(), cfg.Insecure); err != nil {
		t.Errorf("%s: qs serve would refuse to start: %v", name, err)
	}
}

func readManifests(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var objs []k8sObject
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: object without apiVersion, kind or name: %+v", f, o)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

// TestKubernetesManifests parses every manifest and checks what ties them
// together: a 3-member StatefulSet for the HA root with its headless
// Service, a DaemonSet of replicas, and a ConfigMap whose files are valid
// qs configurations naming the root members by their StatefulSet DNS
// names.
func TestKubernetesManifests(t *testing.T) {
	byKind := map[string][]k8sObject{}
	for _, o := range readManifests(t) {
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}
	if len(byKind["StatefulSet"]) != 1 || len(byKind["DaemonSet"]) != 1 || len(byKind["ConfigMap"]) != 1 || len(byKind["Service"]) < 2 {
		t.Fatalf("want a StatefulSet, a DaemonSet, a ConfigMap and Services; have %v", kinds(byKind))
	}
	ss := byKind["StatefulSet"][0]
	if ss.Spec.Replicas != 3 || ss.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("root StatefulSet: %d replicas, policy %q; want 3, Parallel", ss.Spec.Replicas, ss.Spec.PodManagementPolicy)
	}
	headless := false
	for _, s := range byKind["Service"] {
		if s.Metadata.Name == ss.Spec.ServiceName && s.Spec.ClusterIP == "None" {
			headless = true
		}
	}
	if !headless {
		t.Errorf("no headless Service %q for the StatefulSet's member names", ss.Spec.ServiceName)
	}
	for _, w := range []k8sObject{ss, byKind["DaemonSet"][0]} {
		if w.Spec.Template == nil || len(w.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("%s %s: want one container", w.Kind, w.Metadata.Name)
		}
		sel, _ := w.Spec.Selector["matchLabels"].(map[string]any)
		for k, v := range sel {
			if w.Spec.Template.Metadata.Labels[k] != v {
				t.Errorf("%s %s: selector %s=%v does not match the pod labels", w.Kind, w.Metadata.Name, k, v)
			}
		}
		cmd := strings.Join(append(w.Spec.Template.Spec.Containers[0].Command, w.Spec.Template.Spec.Containers[0].Args...), " ")
		if !strings.Contains(cmd, "serve --config /etc/qs/") {
			t.Errorf("%s %s: command %q does not run qs serve with a file of the ConfigMap", w.Kind, w.Metadata.Name, cmd)
		}
		dir, secrets := w.Spec.Template.configFiles(byKind["ConfigMap"][0].Metadata.Name)
		if dir != "/etc/qs" || !slices.Contains(secrets, "cluster.key") {
			t.Errorf("%s %s: the ConfigMap's files in %q with %v from Secrets; want /etc/qs with cluster.key",
				w.Kind, w.Metadata.Name, dir, secrets)
		}
	}

	cm := byKind["ConfigMap"][0]
	for _, name := range []string{"root.toml", "replica.toml", "proxy.toml"} {
		body, ok := cm.Data[name]
		if !ok {
			t.Errorf("ConfigMap lacks %s", name)
			continue
		}
		f := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(f)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		cfg.EnsureDefaults()
		if name == "root.toml" {
			// The pod sets the member id from its ordinal.
			cfg.Databases[0].Raft.NodeID = 2
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		checkStartsAsShipped(t, name, cfg)
		if cfg.ClusterKey != "/etc/qs/cluster.key" {
			t.Errorf("%s: cluster_key %q, want the Secret's /etc/qs/cluster.key", name, cfg.ClusterKey)
		}
		for i := range ss.Spec.Replicas {
			member := ss.Metadata.Name + "-" + string(rune('0'+i)) + "." + ss.Spec.ServiceName + ":"
			if !strings.Contains(body, member) {
				t.Errorf("%s does not name root member %s", name, member)
			}
		}
	}
}

func kinds(m map[string][]k8sObject) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

// TestSystemdUnitsVerify runs systemd-analyze verify on the units, with
// ExecStart pointing at the qs built for the tests, and checks that the
// example configuration loads.
func TestSystemdUnitsVerify(t *testing.T) {
	cfg, err := config.Load(filepath.Join(deployDir, "systemd", "qs.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("qs.toml: %v", err)
	}
	checkStartsAsShipped(t, "qs.toml", cfg)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found: units not verified")
	}
	units, err := filepath.Glob(filepath.Join(deployDir, "systemd", "*.s*"))
	if err != nil || len(units) < 2 {
		t.Fatalf("units: %v %v", units, err)
	}
	dir := t.TempDir()
	var paths []string
	for _, u := range units {
		raw, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		raw = bytes.ReplaceAll(raw, []byte("/usr/local/bin/qs"), []byte(qsBin))
		p := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestContainerfileBuildCommand runs the go build command of the
// container file's build stage (its output in a temporary directory) and
// checks that the image runs the binary it builds.
func TestContainerfileBuildCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds qs")
	}
	raw, err := os.ReadFile(filepath.Join(deployDir, "container", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var build string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "RUN ") && strings.Contains(l, "go build") {
			build = strings.TrimPrefix(l, "RUN ")
		}
	}
	if build == "" || !strings.Contains(string(raw), "COPY --from=build /out/qs /usr/local/bin/qs") ||
		!strings.Contains(string(raw), `ENTRYPOINT ["/usr/local/bin/qs"]`) {
		t.Fatalf("Containerfile: no go build step to /out/qs copied to the entry point")
	}
	out := t.TempDir()
	cmd := exec.Command("sh", "-c", strings.ReplaceAll(build, "/out/qs", filepath.Join(out, "qs")))
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "VERSION=1.2.3")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, b)
	}
	v, err := exec.Command(filepath.Join(out, "qs"), "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "qs 1.2.3 (") {
		t.Fatalf("qs version of the image's binary: %q %v", v, err)
	}
}
