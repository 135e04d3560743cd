package idem

import (
	"context"
	"errors"
)

// ReplicationMode says whether a store's server keeps an acknowledged
// record when it fails over to a replica. Every promise idem makes rests on
// the store keeping what it acknowledged; on a replicated engine that holds
// only when each acknowledged write is on a replica that a failover may
// promote (docs/replication.md).
type ReplicationMode uint8

const (
	// ReplicationUnknown: the store could not read its server's
	// replication (no privilege to read it, or an engine it does not know).
	ReplicationUnknown ReplicationMode = iota

	// ReplicationSingle: no replica is attached and none is configured to
	// be waited for. A crash loses what the server's own durability
	// settings lose; there is no failover to lose more.
	ReplicationSingle

	// ReplicationSynchronous: every write the store acknowledges is on at
	// least one replica first (PostgreSQL synchronous_standby_names with
	// synchronous_commit at least on, MySQL semi-synchronous AFTER_SYNC,
	// Galera, Redis with WAIT).
	ReplicationSynchronous

	// ReplicationAsynchronous: replicas are attached and acknowledged
	// writes may not have reached them. A failover may lose acknowledged
	// records, and each lost record runs again on its next retry.
	ReplicationAsynchronous
)

// String returns "unknown", "single server", "synchronous" or
// "asynchronous replicas".
func (m ReplicationMode) String() string {
	switch m {
	case ReplicationSingle:
		return "single server"
	case ReplicationSynchronous:
		return "synchronous"
	case ReplicationAsynchronous:
		return "asynchronous replicas"
	}
	return "unknown"
}

// Replication is what a store read of its server's replication.
type Replication struct {
	// Mode is the verdict.
	Mode ReplicationMode

	// Replicas is the number of replicas (standbys, other cluster nodes)
	// attached to the server the store writes to, as the server reports
	// it.
	Replicas int

	// Waits is the number of replicas each acknowledged write waits for
	// (0 for single and asynchronous).
	Waits int

	// Detail names the settings that were read and their values, for logs
	// and operators, for example
	// "synchronous_commit=on synchronous_standby_names='s1' 1 standby (sync)".
	// It never contains credentials.
	Detail string
}

// String returns the mode followed by the detail.
func (r Replication) String() string {
	if r.Detail == "" {
		return r.Mode.String()
	}
	return r.Mode.String() + " (" + r.Detail + ")"
}

// ReplicationReporter is implemented by stores that can read how their
// server replicates: sqlstore and redisstore, and the wrappers around them
// (tiered reports its durable store). idem proxy logs the report at start
// and serves it on /readyz and the operations API.
type ReplicationReporter interface {
	Replication(ctx context.Context) (Replication, error)
}

// ErrAsyncReplication is matched (with errors.Is) by the error a store
// returns instead of acknowledging a record while its server replicates
// asynchronously and the operator has not allowed that: a failover could
// lose the record, and its key would run again. The error also matches
// ErrUnavailable, so HTTP adapters answer 503 and nothing runs.
var ErrAsyncReplication = errors.New("idem: the store's server replicates asynchronously, so a failover may lose acknowledged records")
