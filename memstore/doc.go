// Package memstore is an in-process idem.Store: a sharded map guarded by one
// mutex per shard, bounded in size and swept of expired records.
//
// Use it in tests, in single-binary tools, and as the store of one process
// that is the only one to see its keys. It is not shared between processes,
// and it forgets everything when the process exits: a restart re-executes
// any operation whose retry arrives afterwards. For anything that runs on
// more than one instance, use sqlstore or redisstore.
//
// # Bounds
//
// A flood of unique keys must not grow memory without bound.
// Config.MaxEntries caps the number of records in the whole store. When it
// is reached, Begin of a new key first sweeps the expired records of every
// shard (skipped, at no cost, while no record can have expired yet) and, if
// the live records alone fill the store, fails with ErrFull (an
// idem.ErrUnavailable): live records are never evicted, since an evicted
// claim lets its duplicate execute. A background sweeper deletes expired
// records every Config.SweepInterval; Close stops it.
//
// # Guarantees
//
// Every decision is made under the shard's lock, so 200 goroutines racing
// for one key see exactly one Acquired. MarkStarted, Complete, Release and
// Extend compare the owner's token under the same lock.
//
// # Faults
//
// What holds, and what does not, when the world misbehaves:
//
//   - Process restart or crash: everything is lost. Claims, results and
//     marks are gone, so every retry after a restart runs its operation
//     again, and Options.AtMostOnce protects nothing across a restart. Use a
//     durable store when that matters.
//   - Snapshot restore, failover: not applicable; there is no copy.
//   - Clock step: leases and expiries run on this process's monotonic
//     clock, so a wall-clock jump (NTP step, manual change) moves none of
//     them. Fences are the larger of the previous fence plus one and the
//     wall clock in microseconds: after a backwards step they still grow,
//     from the previous fence, as long as the record is stored; a key that
//     was purged and claimed again after a backwards step may get a fence
//     below one issued before the step.
//   - Network faults: none; the fault suite (idemtest.RunFaults) does not
//     apply.
package memstore
