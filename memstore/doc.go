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
// A flood of unique keys must not grow memory without bound. Config.MaxEntries
// caps the number of records; when a shard is full, Begin first sweeps that
// shard's expired records and, if none expired, fails with ErrFull (an
// idem.ErrUnavailable): live records are never evicted, since an evicted
// claim lets its duplicate execute. A background sweeper deletes expired
// records every Config.SweepInterval; Close stops it.
//
// # Guarantees
//
// Every decision is made under the shard's lock, so 200 goroutines racing
// for one key see exactly one Acquired. Time is this process's monotonic
// clock: a wall-clock jump does not move leases or expiries.
package memstore
