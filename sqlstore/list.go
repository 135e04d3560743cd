package sqlstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// List returns up to limit records, newest first (by CreatedAt): those in
// state (StateHeld: the held ones; StateCompleted: the others), or in
// any state when state is 0, and, when startedOnly is set,
// only those with the Started mark. Expired records not purged yet are
// included, with their ExpiresAt in the past. Results are not returned
// (Record.Result is nil); Get a record for its result.
//
// List is for operators ('idem keys list'). It is one SELECT; no index
// covers state or created_at, so it reads the whole table: on a table of
// millions of records, run it rarely.
func (s *Store) List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error) {
	if limit <= 0 {
		return nil, configError("limit", "must be positive")
	}
	if state != 0 && state.String() == "invalid" {
		return nil, configError("state", fmt.Sprintf("unknown state %d", state))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, args := s.listQuery(state, startedOnly, limit)
	rows, err := s.db.QueryContext(ctx, q.sql, q.args(args...)...)
	if err != nil {
		return nil, fail(ctx, "list", err)
	}
	defer rows.Close()
	var out []idem.Record
	for rows.Next() {
		var (
			key, fp                                          []byte
			st, fence, created, leaseUntil, expires, started int64
		)
		if err := rows.Scan(&key, &st, &fp, &fence, &created, &leaseUntil, &expires, &started); err != nil {
			return nil, fail(ctx, "list", err)
		}
		rec := idem.Record{
			State:     idem.State(st),
			Fence:     uint64(fence),
			CreatedAt: time.UnixMicro(created),
			ExpiresAt: time.UnixMicro(expires),
		}
		if rec.State < idem.StateInProgress || rec.State > idem.StateHeld {
			return nil, fmt.Errorf("sqlstore: record %x has unknown state %d (written by a newer release?)", key, st)
		}
		copy(rec.Digest[:], key)
		copy(rec.Fingerprint[:], fp)
		if leaseUntil != 0 {
			rec.LeaseUntil = time.UnixMicro(leaseUntil)
		}
		rec.Started = started != 0
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fail(ctx, "list", err)
	}
	return out, nil
}

// listQuery returns List's statement and its arguments. The conditions are
// spelled out rather than written as "$1 = 0 OR state = $1", which
// PostgreSQL cannot type. The state reads 4 (held) for a completed record
// with the held mark (stateCol).
func (s *Store) listQuery(state idem.State, startedOnly bool, limit int) (query, []any) {
	stateExpr := stateCol[s.cfg.Dialect]
	text := `SELECT key_hash, ` + stateExpr + `, fingerprint, fence, created_at, lease_until, expires_at, ` + startedCol[s.cfg.Dialect] + ` FROM {{table}}`
	var conds []string
	var args []any
	if state != 0 {
		args = append(args, int64(state))
		conds = append(conds, fmt.Sprintf("%s = $%d", stateExpr, len(args)))
	}
	if startedOnly {
		conds = append(conds, startedCond[s.cfg.Dialect])
	}
	if len(conds) > 0 {
		text += " WHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, int64(limit))
	text += fmt.Sprintf(" ORDER BY created_at DESC, key_hash LIMIT $%d", len(args))
	return build(s.cfg.Dialect, s.cfg.Table, text), args
}

// startedCol is the Started mark as an integer, 0 or 1 (PostgreSQL stores
// a boolean, MySQL and SQLite 0 or 1).
var startedCol = map[Dialect]string{Postgres: "CASE WHEN started THEN 1 ELSE 0 END", MySQL: "started", SQLite: "started"}

// startedCond selects records with the Started mark.
var startedCond = map[Dialect]string{Postgres: "started", MySQL: "started = 1", SQLite: "started = 1"}

// DigestsWithPrefix returns the digests of up to limit records whose digest,
// in lower-case hex, begins with prefix (1 to 64 hex digits), in ascending
// order. Expired records not purged yet are included.
//
// It is one range read on the primary key (key_hash between the prefix
// padded with 0s and the prefix padded with fs), so it reads at most limit
// rows however large the table: what an operator's lookup by the digest
// prefix shown in log lines uses ('idem keys', the /ops API).
func (s *Store) DigestsWithPrefix(ctx context.Context, prefix string, limit int) ([]idem.Digest, error) {
	lo, hi, ok := digestPrefixRange(prefix)
	if !ok {
		return nil, configError("prefix", "want 1 to 64 hex digits")
	}
	if limit <= 0 {
		return nil, configError("limit", "must be positive")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := build(s.cfg.Dialect, s.cfg.Table, `SELECT key_hash FROM {{table}} WHERE key_hash >= $1 AND key_hash <= $2 ORDER BY key_hash LIMIT $3`)
	rows, err := s.db.QueryContext(ctx, q.sql, q.args(lo[:], hi[:], int64(limit))...)
	if err != nil {
		return nil, fail(ctx, "list", err)
	}
	defer rows.Close()
	var out []idem.Digest
	for rows.Next() {
		var key []byte
		if err := rows.Scan(&key); err != nil {
			return nil, fail(ctx, "list", err)
		}
		var d idem.Digest
		copy(d[:], key)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fail(ctx, "list", err)
	}
	return out, nil
}

// digestPrefixRange returns the smallest and the largest digest whose hex
// form begins with prefix (lower or upper case), and whether prefix is 1 to
// 64 hex digits.
func digestPrefixRange(prefix string) (lo, hi idem.Digest, ok bool) {
	if len(prefix) == 0 || len(prefix) > 2*len(lo) {
		return lo, hi, false
	}
	lox := []byte(prefix + strings.Repeat("0", 2*len(lo)-len(prefix)))
	hix := []byte(prefix + strings.Repeat("f", 2*len(hi)-len(prefix)))
	if _, err := hex.Decode(lo[:], lox); err != nil {
		return lo, hi, false
	}
	if _, err := hex.Decode(hi[:], hix); err != nil {
		return lo, hi, false
	}
	return lo, hi, true
}
