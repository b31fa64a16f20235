package cache

// Queue is a bounded queue of values waiting to be stored, with a kick
// that wakes the one goroutine draining it. Offer never blocks: a full
// queue refuses. It is safe for concurrent use.
type Queue[T any] struct {
	items chan T
	kick  chan struct{}
}

// NewQueue returns a queue holding at most capacity items.
func NewQueue[T any](capacity int) *Queue[T] {
	return &Queue[T]{items: make(chan T, capacity), kick: make(chan struct{}, 1)}
}

// Offer queues item and wakes the drainer; it reports false when the
// queue is full and item was dropped.
func (q *Queue[T]) Offer(item T) bool {
	select {
	case q.items <- item:
		q.Kick()
		return true
	default:
		return false
	}
}

// Kick wakes the drainer without queueing anything.
func (q *Queue[T]) Kick() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Woken is the channel the drainer waits on.
func (q *Queue[T]) Woken() <-chan struct{} { return q.kick }

// Drain appends to dst up to max queued items, without waiting, and
// kicks again if more remain.
func (q *Queue[T]) Drain(dst []T, max int) []T {
	for n := 0; n < max; n++ {
		select {
		case it := <-q.items:
			dst = append(dst, it)
		default:
			return dst
		}
	}
	if len(q.items) > 0 {
		q.Kick()
	}
	return dst
}

// Len is the number of queued items.
func (q *Queue[T]) Len() int { return len(q.items) }
