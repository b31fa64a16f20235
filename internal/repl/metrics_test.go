package repl

import (
	"regexp"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/quicksilver-kv/qs/internal/metrics/metricstest"
	"github.com/quicksilver-kv/qs/internal/store"
)

// exported are the families of a Metrics, by name, with their type and
// whether they have labels (a labelled family appears once a series of
// it is counted; the others from the start). Dashboards, alert rules
// and the status page read these names.
var exported = map[string]struct {
	typ      dto.MetricType
	labelled bool
}{
	"qs_repl_server_connections":            {dto.MetricType_GAUGE, false},
	"qs_repl_refusals_total":                {dto.MetricType_COUNTER, true},
	"qs_repl_entries_sent_total":            {dto.MetricType_COUNTER, false},
	"qs_repl_entries_relayed_total":         {dto.MetricType_COUNTER, false},
	"qs_repl_entries_applied_total":         {dto.MetricType_COUNTER, true},
	"qs_repl_apply_batch_entries":           {dto.MetricType_HISTOGRAM, false},
	"qs_repl_apply_seconds":                 {dto.MetricType_HISTOGRAM, false},
	"qs_repl_errors_total":                  {dto.MetricType_COUNTER, true},
	"qs_repl_client_refusals_total":         {dto.MetricType_COUNTER, true},
	"qs_repl_reconnects_total":              {dto.MetricType_COUNTER, true},
	"qs_repl_lag_seconds":                   {dto.MetricType_GAUGE, true},
	"qs_repl_forked":                        {dto.MetricType_GAUGE, true},
	"qs_repl_signed_index":                  {dto.MetricType_GAUGE, true},
	"qs_repl_applied_index":                 {dto.MetricType_GAUGE, true},
	"qs_repl_streaming":                     {dto.MetricType_GAUGE, true},
	"qs_repl_snapshots_held":                {dto.MetricType_GAUGE, false},
	"qs_repl_snapshot_transfers":            {dto.MetricType_GAUGE, false},
	"qs_repl_snapshot_transfers_total":      {dto.MetricType_COUNTER, true},
	"qs_repl_snapshot_bytes_sent_total":     {dto.MetricType_COUNTER, false},
	"qs_repl_bootstraps_total":              {dto.MetricType_COUNTER, true},
	"qs_repl_bootstrap_bytes_total":         {dto.MetricType_COUNTER, true},
	"qs_repl_bootstrap_resumed_bytes_total": {dto.MetricType_COUNTER, true},
	"qs_repl_bootstrapping":                 {dto.MetricType_GAUGE, true},
	"qs_repl_fetch_connections":             {dto.MetricType_GAUGE, false},
	"qs_repl_fetch_requests_total":          {dto.MetricType_COUNTER, false},
	"qs_repl_fetch_quiet_total":             {dto.MetricType_COUNTER, false},
	"qs_repl_fetch_keys_total":              {dto.MetricType_COUNTER, true},
	"qs_repl_fetch_catchup_total":           {dto.MetricType_COUNTER, true},
	"qs_repl_fetch_values_too_large_total":  {dto.MetricType_COUNTER, false},
	"qs_repl_fetch_bad_requests_total":      {dto.MetricType_COUNTER, true},
	"qs_repl_shard_keys_total":              {dto.MetricType_COUNTER, true},
	"qs_repl_fetch_seconds":                 {dto.MetricType_HISTOGRAM, false},
	"qs_repl_prefetched_total":              {dto.MetricType_COUNTER, true},
	"qs_repl_prefetch_refused_total":        {dto.MetricType_COUNTER, true},
	"qs_repl_root_known":                    {dto.MetricType_GAUGE, true},
	"qs_repl_reports_received_total":        {dto.MetricType_COUNTER, true},
	"qs_repl_reports_dropped_total":         {dto.MetricType_COUNTER, true},
	"qs_repl_reports_sent_total":            {dto.MetricType_COUNTER, true},
	"qs_repl_reports_unsent_total":          {dto.MetricType_COUNTER, true},
	"qs_repl_prefetch_subscribers":          {dto.MetricType_GAUGE, false},
	"qs_repl_prefetch_published_total":      {dto.MetricType_COUNTER, true},
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// TestMetricsExported pins the names and types of the replication
// metrics: a Metrics describes exactly these families, exports those
// without labels from the start and the others once counted, and a
// root and its replica, one fetch answered, export them with their types.
func TestMetricsExported(t *testing.T) {
	m := NewMetrics()
	descs := make(chan *prometheus.Desc, 2*len(exported))
	m.Describe(descs)
	close(descs)
	var described []string
	for d := range descs {
		described = append(described, fqName.FindStringSubmatch(d.String())[1])
	}
	sort.Strings(described)
	var want []string
	for name := range exported {
		want = append(want, name)
	}
	sort.Strings(want)
	if len(described) != len(want) {
		t.Fatalf("described %d families %v, want %d %v", len(described), described, len(want), want)
	}
	for i := range want {
		if described[i] != want[i] {
			t.Fatalf("described %v, want %v", described, want)
		}
	}

	fresh := metricstest.Families(t, m)
	for name, e := range exported {
		if _, ok := fresh[name]; ok == e.labelled {
			t.Errorf("%s exported %v before anything was counted, want %v", name, ok, !e.labelled)
		}
	}

	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	addr := startServer(t, root, NewProcessID(), nil)
	writeN(t, root, "k", 10)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	startReplica(t, rep, NewProcessID(), []string{addr}, nil)
	waitCaughtUp(t, rep, root)
	entriesApplied(t, name, float64(root.AppliedIndex()))
	c := fetchSession(t, addr, root)
	roundTrip(t, c, &Fetch{ID: 1, Items: []FetchKey{{Key: []byte("k0000")}}})

	got := metricstest.Families(t, metricsOf(t))
	for name, mf := range got {
		if e, ok := exported[name]; !ok || mf.GetType() != e.typ {
			t.Errorf("%s exported as %v, want %v (known: %v)", name, mf.GetType(), e.typ, ok)
		}
	}
	for _, name := range []string{"qs_repl_entries_applied_total", "qs_repl_applied_index", "qs_repl_lag_seconds",
		"qs_repl_streaming", "qs_repl_forked", "qs_repl_root_known", "qs_repl_fetch_keys_total"} {
		if got[name] == nil {
			t.Errorf("%s not exported by a root and its replica", name)
		}
	}
	// The fetch path's series are made on first use: one key answered ok
	// is the one series of fetch_keys_total.
	if keys := got["qs_repl_fetch_keys_total"].GetMetric(); len(keys) != 1 || keys[0].GetCounter().GetValue() != 1 {
		t.Errorf("fetch_keys_total series %v, want {result=\"ok\"} 1", keys)
	}
	if v := counter(t, metricsOf(t).fetchKeys.WithLabelValues("ok")); v != 1 {
		t.Errorf("fetch_keys_total{result=\"ok\"} %v, want 1", v)
	}
}

// Servers, replicas and prefetch subscriptions count in the Metrics they
// were given, and only there: each of two servers refuses one client and
// counts that refusal alone; a replica refused counts it in its own.
func TestMetricsCountPerInstance(t *testing.T) {
	t.Parallel()
	a, b, own := NewMetrics(), NewMetrics(), NewMetrics()
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	write(t, root, "k", "v")
	addrA := startServer(t, root, NewProcessID(), func(c *ServerConfig) { c.Metrics = a })
	addrB := startServer(t, root, NewProcessID(), func(c *ServerConfig) { c.Metrics = b })

	_, m := rawSession(t, addrA, &Hello{Version: ProtocolVersion, Database: "nope", ProcessID: NewProcessID()})
	if rf, ok := m.(*Refuse); !ok || rf.Code != RefuseUnknownDatabase {
		t.Fatalf("hello of an unknown database answered %+v", m)
	}
	other := openStore(t, "", name, store.DBID{}, store.Retention{}) // another database id
	r, stop := startReplica(t, other, NewProcessID(), []string{addrB}, func(c *ReplicaConfig) { c.Metrics = own })
	waitRefused(t, r, RefuseWrongDBID)
	stop()

	if v := counter(t, a.refusals.WithLabelValues(RefuseUnknownDatabase.String())); v != 1 {
		t.Errorf("server A: unknown_database refusals %v, want 1", v)
	}
	if n := testutil.CollectAndCount(a.refusals); n != 1 {
		t.Errorf("server A: %d refusal series, want only unknown_database", n)
	}
	if v := counter(t, b.refusals.WithLabelValues(RefuseWrongDBID.String())); v < 1 {
		t.Errorf("server B: wrong_dbid refusals %v, want at least 1", v)
	}
	if n := testutil.CollectAndCount(b.refusals); n != 1 {
		t.Errorf("server B: %d refusal series, want only wrong_dbid", n)
	}
	if v := counter(t, own.clientRefused.WithLabelValues(name, RefuseWrongDBID.String())); v < 1 {
		t.Errorf("replica: wrong_dbid refusals received %v, want at least 1", v)
	}
	for who, ms := range map[string]*Metrics{"server A": a, "server B": b} {
		if n := testutil.CollectAndCount(ms.clientRefused); n != 0 {
			t.Errorf("%s: %d series of refusals received, want none (the replica's)", who, n)
		}
	}
	if n := testutil.CollectAndCount(own.refusals); n != 0 {
		t.Errorf("replica: %d series of refusals sent, want none (the servers')", n)
	}
	if n := testutil.CollectAndCount(metricsOf(t).refusals) + testutil.CollectAndCount(metricsOf(t).clientRefused); n != 0 {
		t.Errorf("the test's own Metrics has %d refusal series, want none", n)
	}
}

// BenchmarkFetchKeysCounted: counting the keys of one fetch answer by
// status (two statuses), through the series resolved on first use
// (resolved), and through a label lookup per status (lookup).
func BenchmarkFetchKeysCounted(b *testing.B) {
	m := NewMetrics()
	var counts [len(fetchStatusNames)]int
	counts[FetchOK], counts[FetchAbsent] = 90, 10
	b.Run("resolved", func(b *testing.B) {
		for range b.N {
			m.addFetchKeys(&counts)
		}
	})
	b.Run("lookup", func(b *testing.B) {
		for range b.N {
			for s, n := range counts {
				if n > 0 {
					m.fetchKeys.WithLabelValues(fetchStatusNames[s]).Add(float64(n))
				}
			}
		}
	})
}
