package redislock

import (
	"container/heap"
	"sync"
	"time"
)

// watchdog schedules the renewals of one Locker's leases on a single timer.
//
// A timer per lease would be armed on every Acquire and stopped on every
// Release; arming a timer earlier than any other wakes the Go runtime's
// network poller, a system call and a context switch that cost about as much
// as the lock's own Lua work. Here the timer is armed for the earliest
// renewal due; an Acquire only queues its lease (the timer is already set for
// an earlier moment, leases of one Locker share one TTL), and a Release only
// removes it from the queue. When the timer fires, each due renewal runs on
// its own goroutine and schedules the next one itself. No goroutine runs
// between renewals, and none at all for a lock held less than TTL/3.
type watchdog struct {
	mu       sync.Mutex
	queue    leaseQueue // by due time
	timer    *time.Timer
	armed    bool      // timer is set to fire at armedFor
	armedFor time.Time // valid while armed
}

// schedule queues ls's next renewal at due. ls must not be queued.
func (w *watchdog) schedule(ls *Lease, due time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ls.due = due
	heap.Push(&w.queue, ls)
	if w.armed && !due.Before(w.armedFor) {
		return
	}
	w.armed, w.armedFor = true, due
	if w.timer == nil {
		w.timer = time.AfterFunc(time.Until(due), w.fire)
	} else {
		w.timer.Reset(time.Until(due))
	}
}

// cancel removes ls from the queue if it is there. The timer stays set:
// when it fires with nothing due it simply sets itself for the next lease.
func (w *watchdog) cancel(ls *Lease) {
	w.mu.Lock()
	if ls.qidx >= 0 {
		heap.Remove(&w.queue, ls.qidx)
	}
	w.mu.Unlock()
}

// fire starts the renewals that are due and sets the timer for the next.
func (w *watchdog) fire() {
	var due []*Lease
	w.mu.Lock()
	now := time.Now()
	for len(w.queue) > 0 && !w.queue[0].due.After(now) {
		due = append(due, heap.Pop(&w.queue).(*Lease))
	}
	w.armed = false
	if len(w.queue) > 0 {
		next := w.queue[0].due
		w.armed, w.armedFor = true, next
		w.timer.Reset(next.Sub(now))
	}
	w.mu.Unlock()
	for _, ls := range due {
		go ls.renew()
	}
}

// leaseQueue is a container/heap of leases ordered by due; each lease knows
// its index (qidx, -1 when not queued). Guarded by watchdog.mu.
type leaseQueue []*Lease

func (q leaseQueue) Len() int           { return len(q) }
func (q leaseQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q leaseQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].qidx, q[j].qidx = i, j
}
func (q *leaseQueue) Push(x any) {
	ls := x.(*Lease)
	ls.qidx = len(*q)
	*q = append(*q, ls)
}
func (q *leaseQueue) Pop() any {
	old := *q
	ls := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	ls.qidx = -1
	return ls
}
