package redislock

import (
	"container/heap"
	"sync"
	"time"
)

// watchdog schedules the renewals of one Locker's leases on a single timer,
// and their local deadlines.
//
// A timer per lease would be armed on every Acquire and stopped on every
// Release; arming a timer earlier than any other wakes the Go runtime's
// network poller, a system call and a context switch that cost about as much
// as the lock's own Lua work. Here the timer is armed for the earliest
// entry due; an Acquire only queues its lease (the timer is already set for
// an earlier moment, leases of one Locker share one TTL), and a Release only
// removes it from the queue. When the timer fires, each due renewal runs on
// its own goroutine. No goroutine runs between renewals, and none at all for
// a lock held less than TTL/3.
//
// Each lease has one entry in the queue. Between renewals it is the next
// renewal. While a renewal is in flight it is the lease's local deadline
// (Lease.until): if the renewal has not succeeded by then, because Redis is
// unreachable or slow, the timer cancels the lease's context itself. Nothing
// on that path waits for a Redis call, so a black-holed connection, a client
// that ignores its context or a long retry inside the client cannot keep a
// holder running past the moment its lock may have expired.
type watchdog struct {
	mu       sync.Mutex
	queue    leaseQueue // by due time
	timer    *time.Timer
	armed    bool      // timer is set to fire at armedFor
	armedFor time.Time // valid while armed
}

// schedule queues ls at due, as a renewal or as its deadline. ls must not be
// queued.
func (w *watchdog) schedule(ls *Lease, due time.Time, deadline bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.push(ls, due, deadline)
}

// push is schedule with w.mu held.
func (w *watchdog) push(ls *Lease, due time.Time, deadline bool) {
	ls.due, ls.deadline = due, deadline
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

// renewed records the end of ls's renewal, sent at sent, that ended with err
// (nil: the lock's TTL was reset), and replaces the deadline entry with the
// next renewal. It reports false, queueing nothing, if the deadline has
// passed: the watchdog has cancelled the lease or the caller must.
func (w *watchdog) renewed(ls *Lease, sent time.Time, err error) bool {
	cfg := &ls.l.cfg
	w.mu.Lock()
	defer w.mu.Unlock()
	if ls.qidx < 0 || !ls.deadline {
		return false // the deadline fired: the lease is cancelled
	}
	heap.Remove(&w.queue, ls.qidx)
	now := time.Now()
	if mono(now) >= ls.until.Load() {
		return false
	}
	if err == nil {
		ls.lastErr = nil
		if u := mono(sent.Add(cfg.TTL - cfg.SafetyMargin)); u > ls.until.Load() {
			ls.until.Store(u)
		}
		w.push(ls, now.Add(cfg.TTL/3), false)
		return true
	}
	ls.lastErr = err
	until := epoch.Add(time.Duration(ls.until.Load()))
	if next := now.Add(max(cfg.TTL/20, time.Millisecond)); next.Before(until) {
		w.push(ls, next, false)
	} else {
		w.push(ls, until, true) // no time for another try: wait for the deadline
	}
	return true
}

// fire starts the renewals that are due, cancels the leases whose deadline
// has come, and sets the timer for the next entry.
func (w *watchdog) fire() {
	type expiry struct {
		ls      *Lease
		lastErr error
	}
	var (
		renew  []*Lease
		expire []expiry
	)
	w.mu.Lock()
	now := time.Now()
	for len(w.queue) > 0 && !w.queue[0].due.After(now) {
		ls := heap.Pop(&w.queue).(*Lease)
		until := ls.until.Load()
		if ls.deadline || mono(now) >= until {
			expire = append(expire, expiry{ls, ls.lastErr})
			continue
		}
		// While the renewal runs, the entry is the deadline.
		w.push(ls, epoch.Add(time.Duration(until)), true)
		renew = append(renew, ls)
	}
	w.armed = false
	if len(w.queue) > 0 {
		next := w.queue[0].due
		w.armed, w.armedFor = true, next
		w.timer.Reset(next.Sub(now))
	}
	w.mu.Unlock()
	for _, e := range expire {
		e.ls.cancel(expired(e.ls.l.cfg.TTL, e.lastErr))
	}
	for _, ls := range renew {
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
