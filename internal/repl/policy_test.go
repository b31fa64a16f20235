package repl

import "testing"

// TestAttemptPlan walks the source policy of Replica.Run through
// sequences of attempt outcomes, with three sources.
func TestAttemptPlan(t *testing.T) {
	type ev struct {
		o          outcome
		progressed bool
		// after the event:
		src       int // the source of the next attempt
		bootstrap bool
		now       bool
		reset     bool
		begin     bool
	}
	for _, tc := range []struct {
		name string
		evs  []ev
	}{
		{"failures rotate through the sources", []ev{
			{o: outcomeFailed, src: 1},
			{o: outcomeFailed, src: 2},
			{o: outcomeFailed, src: 3},
		}},
		{"a session that applied entries resets the backoff, then moves on", []ev{
			{o: outcomeFailed, progressed: true, src: 1, reset: true},
		}},
		{"a source ending the stream counts as a failure", []ev{
			{o: outcomeOK, src: 1},
		}},
		{"new replica far behind bootstraps from the same source at once", []ev{
			{o: outcomeFailed, src: 1},
			{o: outcomeNeedBootstrap, src: 1, bootstrap: true, now: true, begin: true},
			{o: outcomeOK, src: 1, now: true, reset: true},
		}},
		{"a broken bootstrap that moved resumes from the same source", []ev{
			{o: outcomeNeedBootstrap, src: 0, bootstrap: true, now: true, begin: true},
			{o: outcomeFailed, progressed: true, src: 0, bootstrap: true, reset: true},
			{o: outcomeFailed, src: 1, bootstrap: true},
		}},
		{"log_truncated tries the other sources, then bootstraps from the first that refused", []ev{
			{o: outcomeLogTruncated, src: 1},
			{o: outcomeLogTruncated, src: 2},
			{o: outcomeLogTruncated, src: 0, bootstrap: true, now: true, begin: true},
		}},
		{"log_truncated then a source that continues the log", []ev{
			{o: outcomeLogTruncated, src: 1},
			{o: outcomeFailed, progressed: true, src: 2, reset: true},
			{o: outcomeLogTruncated, src: 3},
			{o: outcomeFailed, src: 4},
			// A whole round (sources 2, 0, 1) without the log: bootstrap
			// from 2, the first that refused.
			{o: outcomeLogTruncated, src: 2, bootstrap: true, now: true, begin: true},
		}},
		{"reconnect goes to the first source at once", []ev{
			{o: outcomeFailed, src: 1},
			{o: outcomeMoved, src: 0, now: true, reset: true},
		}},
		{"reconnect ends a log_truncated round", []ev{
			{o: outcomeLogTruncated, src: 1},
			{o: outcomeMoved, src: 0, now: true, reset: true},
			{o: outcomeLogTruncated, src: 1},
			{o: outcomeLogTruncated, src: 2},
			{o: outcomeLogTruncated, src: 0, bootstrap: true, now: true, begin: true},
		}},
		{"a source behind the replica is asked again soon, never bootstrapped from", []ev{
			{o: outcomeAhead, src: 1, reset: true},
			{o: outcomeAhead, src: 2, reset: true},
			{o: outcomeAhead, src: 3, reset: true},
			{o: outcomeAhead, src: 4, reset: true},
			{o: outcomeFailed, progressed: true, src: 5, reset: true},
		}},
		// The others lack the log the replica needs next, and the one
		// behind it does not hold it either: the round ends as without it.
		{"a source behind the replica counts in a log_truncated round", []ev{
			{o: outcomeLogTruncated, src: 1},
			{o: outcomeAhead, src: 2, reset: true},
			{o: outcomeLogTruncated, src: 0, bootstrap: true, now: true, begin: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newAttemptPlan()
			for i, e := range tc.evs {
				var st attemptStep
				p, st = p.after(e.o, e.progressed, 3)
				if p.next != e.src || p.bootstrapping != e.bootstrap || st.now != e.now || st.resetBackoff != e.reset || st.beginBootstrap != e.begin {
					t.Fatalf("event %d (%d): next=%d bootstrapping=%v %+v; want next=%d bootstrapping=%v now=%v reset=%v begin=%v",
						i, e.o, p.next, p.bootstrapping, st, e.src, e.bootstrap, e.now, e.reset, e.begin)
				}
				if e.o == outcomeAhead {
					if st.failed {
						t.Fatalf("event %d: a source behind the replica counted as failed", i)
					}
				} else if st.failed == (e.now || e.begin) {
					t.Fatalf("event %d: failed=%v with now=%v begin=%v", i, st.failed, e.now, e.begin)
				}
			}
		})
	}
}

// A new source list starts a new round from its first source.
func TestAttemptPlanSourcesChanged(t *testing.T) {
	p := newAttemptPlan()
	p, _ = p.after(outcomeLogTruncated, false, 3)
	p, _ = p.after(outcomeFailed, false, 3)
	p = p.sourcesChanged()
	if p.next != 0 || p.truncatedAt != -1 {
		t.Fatalf("after a new list: %+v", p)
	}
	p, _ = p.after(outcomeNeedBootstrap, false, 3)
	p = p.sourcesChanged()
	if !p.bootstrapping {
		t.Fatal("a new list ended a bootstrap under way")
	}
}
