package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"

	"github.com/HdrHistogram/hdrhistogram-go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Read latency per cache tier in the tiers scenario. The proxies do not
// say which tier answered a read, so each tier's figures come from where
// they can be measured honestly:
//
//   - L2 and L3: the proxies' own histograms of one fetch from the tier
//     (qs_store_proxy_tier_fetch_seconds{tier="l2"}, the owner of the
//     key's shard asked, hit or miss; for the relays or replicas asked,
//     {tier="l3"} with the L2 tier, qs_proxy_fetch_seconds without it),
//     summed over the proxies and differenced over
//     the measurement. Each reader reads one key per request, so one
//     fetch is one read's wait for that tier. A histogram gives a
//     quantile only to its bucket: the figure is the bucket's upper
//     bound, a bound the quantile does not exceed.
//   - L1: an upper bound from the readers' own latencies. With a share f
//     of the reads answered by L1, at most a share 1-f of all reads are
//     not, so L1's q-quantile is at most all reads' (1-(1-q)·f)-quantile.

// Metric families of the per-tier histograms.
const (
	metricL2Seconds = "qs_store_proxy_tier_fetch_seconds"
	metricL3Seconds = "qs_proxy_fetch_seconds"
)

// bucketHist is a cumulative histogram: counts[i] observations at most
// bounds[i] (seconds), the last bound +Inf.
type bucketHist struct {
	bounds []float64
	counts []uint64
}

// histOf sums the histograms of family mf whose labels include want.
func histOf(mf *dto.MetricFamily, want map[string]string) bucketHist {
	var h bucketHist
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, want) || m.GetHistogram() == nil {
			continue
		}
		var o bucketHist
		for _, b := range m.GetHistogram().GetBucket() {
			o.bounds = append(o.bounds, b.GetUpperBound())
			o.counts = append(o.counts, b.GetCumulativeCount())
		}
		if len(o.bounds) == 0 || !math.IsInf(o.bounds[len(o.bounds)-1], 1) {
			o.bounds = append(o.bounds, math.Inf(1))
			o.counts = append(o.counts, m.GetHistogram().GetSampleCount())
		}
		h = h.plus(o)
	}
	return h
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// plus adds o to h bound by bound; histograms of other bounds add only
// where bounds are shared (the proxies all use the same buckets).
func (h bucketHist) plus(o bucketHist) bucketHist {
	if len(h.bounds) == 0 {
		return bucketHist{bounds: append([]float64(nil), o.bounds...), counts: append([]uint64(nil), o.counts...)}
	}
	out := bucketHist{bounds: append([]float64(nil), h.bounds...), counts: append([]uint64(nil), h.counts...)}
	for i, b := range out.bounds {
		if j := sort.SearchFloat64s(o.bounds, b); j < len(o.bounds) && o.bounds[j] == b {
			out.counts[i] += o.counts[j]
		}
	}
	return out
}

// minus is h less an earlier sample of the same histogram (0 where the
// earlier one is larger: a restarted node).
func (h bucketHist) minus(o bucketHist) bucketHist {
	out := bucketHist{bounds: append([]float64(nil), h.bounds...), counts: append([]uint64(nil), h.counts...)}
	for i, b := range out.bounds {
		if j := sort.SearchFloat64s(o.bounds, b); j < len(o.bounds) && o.bounds[j] == b {
			if o.counts[j] > out.counts[i] {
				out.counts[i] = 0
			} else {
				out.counts[i] -= o.counts[j]
			}
		}
	}
	return out
}

func (h bucketHist) total() uint64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// bucket is the lower and upper bound, in seconds, of the bucket
// holding h's q-quantile (the upper +Inf beyond the last finite bound);
// both 0 when h is empty.
func (h bucketHist) bucket(q float64) (lo, hi float64) {
	n := h.total()
	if n == 0 {
		return 0, 0
	}
	rank := max(uint64(math.Ceil(q*float64(n))), 1)
	for i, c := range h.counts {
		if c >= rank {
			if i > 0 {
				lo = h.bounds[i-1]
			}
			return lo, h.bounds[i]
		}
	}
	return h.bounds[len(h.bounds)-1], math.Inf(1)
}

func (h bucketHist) bound(q float64) float64 {
	_, hi := h.bucket(q)
	return hi
}

// beyondBuckets is a quantile above the last finite bucket of its
// histogram (JSON has no infinity).
const beyondBuckets = -1

// TierLatency is the read latency of one tier, in microseconds. Bound:
// the figures are upper bounds (a histogram's bucket, or L1's bound).
type TierLatency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p99_9_us"`
	// P99Above is the lower bound of P99's bucket: the p99 is above it
	// (0 for L1's bound).
	P99Above float64 `json:"p99_above_us,omitempty"`
}

// latencyOf is h's quantiles as bucket bounds.
func latencyOf(h bucketHist) TierLatency {
	us := func(s float64) float64 {
		if math.IsInf(s, 1) {
			return beyondBuckets
		}
		return s * 1e6
	}
	lo, _ := h.bucket(0.99)
	return TierLatency{Count: int64(h.total()), P50: us(h.bound(0.5)), P99: us(h.bound(0.99)), P999: us(h.bound(0.999)), P99Above: us(lo)}
}

// hist is the latency histogram of op's requests, nil if none.
func (r *phaseRun) hist(op string) *hdrhistogram.Histogram {
	for _, n := range r.ops {
		if n.op == op {
			return n.c.hist
		}
	}
	return nil
}

// l1Bound is the bound on L1's latency from all reads' histogram h, with
// l1Share (0..1] of the reads answered by L1.
func l1Bound(h *hdrhistogram.Histogram, l1Share float64) TierLatency {
	if h.TotalCount() == 0 || l1Share <= 0 {
		return TierLatency{}
	}
	l1Share = min(l1Share, 1)
	at := func(q float64) float64 {
		return float64(h.ValueAtQuantile(100*(1-(1-q)*l1Share))) / 1e3
	}
	return TierLatency{Count: int64(math.Round(float64(h.TotalCount()) * l1Share)), P50: at(0.5), P99: at(0.99), P999: at(0.999)}
}

// tierHists are the per-tier histograms of the proxies of a data centre.
type tierHists struct{ l2, l3 bucketHist }

func (t tierHists) plus(o tierHists) tierHists {
	return tierHists{l2: t.l2.plus(o.l2), l3: t.l3.plus(o.l3)}
}

func (t tierHists) minus(o tierHists) tierHists {
	return tierHists{l2: t.l2.minus(o.l2), l3: t.l3.minus(o.l3)}
}

// histsOf picks the per-tier histograms of database db out of a node's
// metrics. With the L2 tier, L3 is the store's histogram of reads'
// fetches from it (the pool's also times the shard budget's warm-up);
// without, the pool's.
func histsOf(mfs map[string]*dto.MetricFamily, db string, withL2 bool) tierHists {
	h := tierHists{l2: histOf(mfs[metricL2Seconds], map[string]string{"db": db, "tier": "l2"})}
	if withL2 {
		h.l3 = histOf(mfs[metricL2Seconds], map[string]string{"db": db, "tier": "l3"})
	} else {
		h.l3 = histOf(mfs[metricL3Seconds], map[string]string{"db": db})
	}
	return h
}

// scrapeMetrics reads and parses the /metrics of the node at httpAddr.
func scrapeMetrics(ctx context.Context, httpAddr string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := statusClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: http %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return mfs, nil
}
