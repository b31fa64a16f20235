package repl

import "github.com/quicksilver-kv/qs/internal/store"

// answerRelayFetch answers a Fetch on a relay: a proxy store that resolves
// the misses of the proxies of its data centre. The keys are read through
// the store like its own readers' (its cache, its transient tier, else
// one fetch from its replicas, checked against its records), all at its
// applied index A. A relay keeps no history, so a key is answered only if
// its version at A is the one asked:
//
//   - A below the version asked (or below asof, for index 0): behind;
//   - the key changed or went away after the version asked: gone;
//   - a version below the one asked although A is not: mismatch (the
//     asker and the relay disagree on the log);
//   - the read failed (no replica answered the relay in time): error.
//
// The asker asks elsewhere for every key not answered ok. The keys are
// counted in ms.
func answerRelayFetch(st *store.Store, m *Fetch, ms *Metrics) *Values {
	ans := &Values{ID: m.ID, Results: make([]FetchResult, len(m.Items))}
	keys := make([][]byte, len(m.Items))
	for i := range m.Items {
		keys[i] = m.Items[i].Key
	}
	var arena []byte
	size := 0
	at, err := st.Lookup(keys, func(at uint64, i int, value []byte, index uint64, found bool) error {
		it, r := &m.Items[i], &ans.Results[i]
		need := it.Index
		if need == 0 {
			need = m.AsOf // 0: the relay's applied index
		}
		if need == 0 {
			need = at
		}
		switch {
		case at < need:
			r.Status = FetchBehind
		case it.Index == 0 && m.AsOf != 0 && m.AsOf != at:
			r.Status = FetchGone // current at asof, not at A: no history here
		case !found && it.Index == 0:
			r.Status = FetchAbsent
		case !found || index > need:
			r.Status = FetchGone
		case index < need && it.Index != 0:
			r.Status = FetchMismatch
		case len(value) > MaxFetchValueBytes:
			r.Status = FetchError
			ms.fetchTooLarge.Inc()
		case size >= maxValuesBytes, size > 0 && size+len(value) > maxValuesBytes:
			r.Status = FetchSkipped
		default:
			start := len(arena)
			arena = append(arena, value...)
			r.Status, r.Index, r.Value = FetchOK, index, arena[start:len(arena):len(arena)]
			size += len(value)
		}
		return nil
	})
	if err != nil {
		for i := range ans.Results {
			ans.Results[i] = FetchResult{Status: FetchError}
		}
	}
	ans.Applied, ans.Horizon = at, at
	var counts [len(fetchStatusNames)]int
	for _, r := range ans.Results {
		counts[r.Status]++
	}
	ms.addFetchKeys(&counts)
	return ans
}
