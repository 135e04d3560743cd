// Package locktest is the conformance suite for implementations of
// lock.Locker, as idemtest.RunStore is for stores: the behaviour every
// backend owes its callers, run against yours with Run.
//
// The suite checks what package lock documents: one holder at a time
// (mutual exclusion under contention, measured in the caller's memory),
// fences that grow with every acquisition and are never handed out twice,
// TryAcquire's ErrNotAcquired while the lock is held, Acquire giving up
// with ErrNotAcquired and the context's error when its context ends, a
// waiting Acquire taking the lock when its holder releases it, Release
// being idempotent and cancelling the lease's context with ErrReleased,
// lock.Do's Valid inside the critical section, and a parent context's
// cancellation reaching the lease's context.
//
// pglock and redislock run it; what only one backend does (advisory locks
// inside a transaction, expiry and renewal, failover) stays in their own
// tests. The suite needs no server of its own: the Locker it is given
// decides where the locks live.
package locktest
