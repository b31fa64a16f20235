package repl

// The source policy of Replica.Run, free of I/O: which source the next
// attempt goes to, whether it bootstraps, and whether it waits first.

// outcome classifies how one attempt (a session or a bootstrap) ended.
type outcome int

const (
	// outcomeOK: the attempt ended without error (a bootstrap installed
	// its snapshot; a session's source ended the stream).
	outcomeOK outcome = iota
	// outcomeNeedBootstrap: a new replica's source is too far ahead to
	// replay the log.
	outcomeNeedBootstrap
	// outcomeLogTruncated: the source refused log_truncated.
	outcomeLogTruncated
	// outcomeMoved: the session was ended on purpose to reconnect
	// (Replica.Reconnect), not because the source failed.
	outcomeMoved
	// outcomeAhead: the source refused "ahead": the replica holds entries
	// the source has not made durable (it restarted after relaying them,
	// relay.go). Both logs are prefixes of the root's, so the source is
	// behind, not forked: the replica asks again soon, never bootstraps.
	outcomeAhead
	// outcomeFailed: any other error.
	outcomeFailed
)

// attemptPlan is the policy's state between attempts.
type attemptPlan struct {
	// next counts attempts over the source list: the next source is
	// sources[next % len(sources)].
	next int
	// bootstrapping: the last attempt found the replica must bootstrap,
	// from the same source (whose snapshot a broken download resumes).
	bootstrapping bool
	// truncatedAt: the attempt (a count like next) whose source first
	// refused log_truncated since the replica last applied entries; -1 if
	// none. The replica tries its other sources (a secondary keeps a long
	// log for this) and bootstraps from that one only after a whole round
	// in which none continued its log.
	truncatedAt int
}

func newAttemptPlan() attemptPlan { return attemptPlan{truncatedAt: -1} }

// attemptStep is what the policy decides after an attempt.
type attemptStep struct {
	// now: start the next attempt at once; otherwise after the backoff.
	now bool
	// resetBackoff: the attempt made progress; the backoff starts over.
	resetBackoff bool
	// beginBootstrap: the replica starts bootstrapping (from the source
	// the plan points at now).
	beginBootstrap bool
	// failed: the attempt failed (counted and logged by the caller).
	failed bool
}

// sourcesChanged returns the plan for a new source list (sources found
// through the overlay change between attempts): the first source next,
// and the log_truncated round starts over. A bootstrap under way goes on
// from the new first source.
func (p attemptPlan) sourcesChanged() attemptPlan {
	p.next, p.truncatedAt = 0, -1
	return p
}

// after returns the plan and the step that follow an attempt that ended
// with o, having applied entries (or snapshot bytes) if progressed, with
// n sources configured.
func (p attemptPlan) after(o outcome, progressed bool, n int) (attemptPlan, attemptStep) {
	var st attemptStep
	switch {
	case o == outcomeMoved:
		// Told to reconnect: at once, to the first source of the list.
		p.next, p.truncatedAt = 0, -1
		return p, attemptStep{now: true, resetBackoff: true}
	case p.bootstrapping && o == outcomeOK:
		// Installed: stream the log from the snapshot on, at once.
		p.bootstrapping = false
		return p, attemptStep{now: true, resetBackoff: true}
	case !p.bootstrapping && o == outcomeLogTruncated && (p.truncatedAt < 0 || p.next-p.truncatedAt < n-1):
		// Another source may still hold the log we need.
		if p.truncatedAt < 0 {
			p.truncatedAt = p.next
		}
		p.next++
		st.failed = true
	case !p.bootstrapping && (o == outcomeNeedBootstrap || o == outcomeLogTruncated):
		if p.truncatedAt >= 0 {
			p.next, p.truncatedAt = p.truncatedAt, -1 // the preferred source that lacks the log
		}
		p.bootstrapping = true
		return p, attemptStep{now: true, beginBootstrap: true}
	case !p.bootstrapping && o == outcomeAhead:
		// Not the source's fault: it catches up from its own source.
		// Another source may be further on; with one, the same again,
		// after the shortest pause.
		p.next++
		return p, attemptStep{resetBackoff: true}
	case p.bootstrapping && progressed:
		// Resume with the same source after the backoff.
		st.failed = true
	default:
		p.next++
		st.failed = true
	}
	if progressed {
		st.resetBackoff = true
		p.truncatedAt = -1
	}
	return p, st
}
