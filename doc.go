// Package idem makes "do it again" harmless.
//
// Networks fail, so clients retry after timeouts, brokers redeliver, users
// double-click and compensations get replayed: the same operation arrives
// more than once. idem lets a service execute it once and answer every
// repeat with the first result.
//
// This package is the domain: keys, fingerprints, the Store contract, the
// outcomes of a claim, and Do, a guard that makes any Go function
// idempotent. It depends on nothing outside the standard library; stores
// and integrations live in their own packages (memstore, sqlstore,
// redisstore, tiered, httpidem, inbox, fsm, optlock, onetime, lock).
//
// # Keys
//
// A Key is one business action: an id chosen by the client (a UUID) or by
// the business (an order number), inside a scope the server derives from
// the caller (tenant, principal, API key hash). A retry must reuse the key;
// a new key is a new action. Stores keep only the key's SHA-256 digest.
//
// # The record
//
// Store.Begin decides atomically, in the storage engine, what a call may do:
//
//	stored                         fingerprint  outcome
//	nothing, expired or released   any          Acquired: execute, then Complete or Release
//	completed                      same         Replay: the stored result
//	in progress, lease valid       same         InFlight: try again after RetryAfter
//	in progress, lease expired     same         Acquired by takeover; the old owner is fenced out
//	completed or in progress       different    Mismatch
//
// The owner renews its lease while it works and until its Complete or
// Release has returned (Heartbeat), completes with the result, or
// releases the claim on failure so a retry can run. A stale
// owner's Complete, Release and Extend fail with ErrLeaseLost and change
// nothing. Every acquisition carries a fence that only grows for a key;
// pass it to your own conditional writes.
//
// # Guarantees
//
// Under concurrency: at most one caller holds a key's claim at a time, and
// every caller after completion gets the same stored result.
//
// Under a crash: a claim whose owner died is taken over after its lease.
// If the owner acted before dying, the operation runs again. That is at
// most one live owner, not exactly-once. The gap closes only when the
// effect and the completion commit together (sqlstore.CompleteTx) or the
// effect is itself conditional (a unique constraint, a fenced write).
//
// Under a store outage: every call fails with an error matching
// ErrUnavailable; nothing runs unprotected. A result is only returned after
// the store recorded it, so every success a caller sees is one a retry
// will see too.
//
// Under a clock jump: leases and expiries use the store's clock, not each
// node's; heartbeats use the local monotonic clock and give the work up a
// fifth of a lease before the store could grant the claim to anyone else,
// counted from when Begin was sent.
//
// # At most once
//
// For work whose effects cannot be made conditional (a request to a
// provider that does not deduplicate), Options.AtMostOnce records in the
// store that the work is starting (Store.MarkStarted, one round trip)
// before it runs. A takeover that finds the mark does not run it again: it
// completes the key as outcome-unknown and returns ErrOutcomeUnknown, and so
// does every retry. The price: a holder that died after the mark but
// before acting leaves a key held as outcome-unknown, for an operator to
// resolve, instead of one run twice.
//
// A result the store cannot hold (ErrResultTooLarge) makes Do leave a
// terminal "not replayable" record: retries get ErrNotReplayable and the
// work never runs again.
//
// # Faults
//
// What each store promises under a restart, a snapshot restore, a failover
// and a clock step is in its package documentation. In short: a durable
// store (sqlstore; redisstore on a Redis that persists every write) keeps
// every completed result across a restart; a snapshot restore or a
// failover to a lagging replica forgets what was written after the copy
// was taken, and keys completed since then run again; memstore forgets
// everything. idemtest.RunFaults checks every store with a server through
// real network faults.
//
// # Modules
//
// This module needs only the standard library and a Bloom filter: the
// root, memstore, sqlstore (bring your own database/sql driver), tiered,
// httpidem, idemclient, fsm, optlock, lock, onetime, inbox and idemtest. Every
// integration that imports a third-party module is a module of its own
// that requires only that dependency: github.com/idemkit/idem/redis
// (redisstore, redislock, redistoken, redisinbox), grpcidem, connectidem,
// httpidem/ginidem, httpidem/echoidem, promidem, otelidem, the broker
// adapters under inbox/, inbox/pgxinbox and cmd/idem. Importing a package
// adds to your go.mod only what that package needs; see docs/modules.md.
//
// # Adapters
//
// Do, httpidem's middleware and the gRPC and Connect interceptors share
// one claim engine: Claimer.Begin decides, and an Attempt runs the claimed
// work (heartbeat, mark started, work, then Complete, Release or Hold).
// An adapter keeps only its protocol: where the key comes from, how a
// result is encoded, what each answer is called. Write a new adapter (a
// message consumer, a job runner) on them too; see ExampleClaimer.
//
// # Who uses what
//
// docs/stability.md lists every exported identifier of this package with
// its reader: a service author (Do, keys, errors, states, the Store
// contract), a store author (the helpers a Store implementation calls),
// or an adapter author (the claim engine above), and what is stable
// before 1.0.
package idem
