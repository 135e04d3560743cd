package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/step"
)

var _ step.Store = (*Store)(nil)

// stepQueries are the statements on Table+"_steps" (migration 0004).
//
// Canonical arguments:
//
//	save, saveTx: $1 key, $2 token, $3 fence, $4 name, $5 result
//	load:         $1 key, $2 token, $3 fence
//	refresh:      $1 key, $2 created_at, $3 expires_at (MySQL only)
//	purge:        $1 grace µs, $2 batch
type stepQueries struct {
	save, saveTx, load, refresh, purge query
}

// A point is stale, left by an earlier operation of the key, when it
// expired before the claim that reads it was acquired (stale: s is the
// point, r the record). The saves below overwrite a stale point and keep
// a live one.
func newStepQueries(d Dialect, table, level string) stepQueries {
	b := func(text string) query {
		text = strings.ReplaceAll(text, "{{steps}}", table+"_steps")
		return build(d, table, strings.ReplaceAll(text, "{{pin}}", pinExpr(level)))
	}
	var q stepQueries
	// The owner check reads the record with a share lock, held to the
	// end of the statement's transaction (the caller's, for SaveStepTx):
	// a takeover's UPDATE waits for it, and a save that waited for a
	// takeover reads the new owner and writes nothing.
	switch d {
	case Postgres:
		const save = `INSERT INTO {{steps}} AS s (key_hash, name, result, fence, claimed_at, expires_at)
SELECT r.key_hash, $4, $5, r.fence, r.created_at, r.expires_at FROM {{table}} r%s
WHERE r.key_hash = $1 AND r.owner = $2 AND r.fence = $3 AND r.state = 1
FOR SHARE OF r
ON CONFLICT (key_hash, name) DO UPDATE SET
	result = CASE WHEN s.expires_at <= excluded.claimed_at THEN excluded.result ELSE s.result END,
	fence = CASE WHEN s.expires_at <= excluded.claimed_at THEN excluded.fence ELSE s.fence END,
	claimed_at = CASE WHEN s.expires_at <= excluded.claimed_at THEN excluded.claimed_at ELSE s.claimed_at END,
	expires_at = CASE WHEN s.expires_at <= excluded.claimed_at THEN excluded.expires_at ELSE GREATEST(s.expires_at, excluded.expires_at) END`
		q.save = b("WITH p AS (SELECT {{pin}} AS pin)\n" + fmt.Sprintf(save, ", p"))
		q.saveTx = b(fmt.Sprintf(save, ""))
		// One round trip: the record's row (none: the owner lost it), its
		// live points, and their expiry moved to the record's.
		q.load = b(`WITH r AS (SELECT key_hash, created_at, expires_at FROM {{table}}
	WHERE key_hash = $1 AND owner = $2 AND fence = $3 AND state = 1),
u AS (UPDATE {{steps}} s SET expires_at = r.expires_at FROM r
	WHERE s.key_hash = r.key_hash AND s.expires_at > r.created_at AND s.expires_at < r.expires_at)
SELECT s.name, s.result FROM r LEFT JOIN {{steps}} s ON s.key_hash = r.key_hash AND s.expires_at > r.created_at`)
		q.purge = b(`WITH c AS (SELECT {{now}} - $1 AS cutoff)
DELETE FROM {{steps}} s USING c
WHERE (s.key_hash, s.name) IN (SELECT p.key_hash, p.name FROM {{steps}} p, c WHERE p.expires_at <= c.cutoff
		AND NOT EXISTS (SELECT 1 FROM {{table}} r WHERE r.key_hash = p.key_hash AND r.created_at < p.expires_at AND r.expires_at > c.cutoff)
		LIMIT $2)
	AND s.expires_at <= c.cutoff`)
	case MySQL:
		// Assignments run left to right, each seeing the ones before:
		// expires_at, which the condition reads, is assigned last.
		q.save = b(`INSERT INTO {{steps}} (key_hash, name, result, fence, claimed_at, expires_at)
SELECT r.key_hash, $4, $5, r.fence, r.created_at, r.expires_at FROM {{table}} r
WHERE r.key_hash = $1 AND r.owner = $2 AND r.fence = $3 AND r.state = 1
LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
	result = IF({{steps}}.expires_at <= VALUES(claimed_at), VALUES(result), {{steps}}.result),
	fence = IF({{steps}}.expires_at <= VALUES(claimed_at), VALUES(fence), {{steps}}.fence),
	claimed_at = IF({{steps}}.expires_at <= VALUES(claimed_at), VALUES(claimed_at), {{steps}}.claimed_at),
	saves = {{steps}}.saves + 1,
	expires_at = IF({{steps}}.expires_at <= VALUES(claimed_at), VALUES(expires_at), GREATEST({{steps}}.expires_at, VALUES(expires_at)))`)
		q.saveTx = q.save
		q.load = b(`SELECT r.created_at, r.expires_at, s.name, s.result, s.expires_at FROM {{table}} r
LEFT JOIN {{steps}} s ON s.key_hash = r.key_hash AND s.expires_at > r.created_at
WHERE r.key_hash = $1 AND r.owner = $2 AND r.fence = $3 AND r.state = 1`)
		q.refresh = b(`UPDATE {{steps}} SET expires_at = $3 WHERE key_hash = $1 AND expires_at > $2 AND expires_at < $3`)
		q.purge = b(`DELETE FROM {{steps}} WHERE expires_at <= {{now}} - $1
	AND NOT EXISTS (SELECT 1 FROM {{table}} r WHERE r.key_hash = {{steps}}.key_hash AND r.created_at < {{steps}}.expires_at AND r.expires_at > {{now}} - $1)
ORDER BY expires_at LIMIT $2`)
	case SQLite:
		// One statement is atomic: SQLite has one writer at a time.
		q.save = b(`INSERT INTO {{steps}} (key_hash, name, result, fence, claimed_at, expires_at)
SELECT r.key_hash, $4, $5, r.fence, r.created_at, r.expires_at FROM {{table}} r
WHERE r.key_hash = $1 AND r.owner = $2 AND r.fence = $3 AND r.state = 1
ON CONFLICT (key_hash, name) DO UPDATE SET
	result = CASE WHEN expires_at <= excluded.claimed_at THEN excluded.result ELSE result END,
	fence = CASE WHEN expires_at <= excluded.claimed_at THEN excluded.fence ELSE fence END,
	claimed_at = CASE WHEN expires_at <= excluded.claimed_at THEN excluded.claimed_at ELSE claimed_at END,
	expires_at = CASE WHEN expires_at <= excluded.claimed_at THEN excluded.expires_at ELSE max(expires_at, excluded.expires_at) END`)
		q.saveTx = q.save
		q.load = b(`UPDATE {{steps}} SET expires_at = max({{steps}}.expires_at, r.expires_at)
FROM (SELECT created_at, expires_at FROM {{table}} WHERE key_hash = $1 AND owner = $2 AND fence = $3 AND state = 1) r
WHERE {{steps}}.key_hash = $1 AND {{steps}}.expires_at > r.created_at
RETURNING name, result`)
		q.purge = b(`DELETE FROM {{steps}}
WHERE (key_hash, name) IN (SELECT p.key_hash, p.name FROM {{steps}} p WHERE p.expires_at <= {{now}} - $1
		AND NOT EXISTS (SELECT 1 FROM {{table}} r WHERE r.key_hash = p.key_hash AND r.created_at < p.expires_at AND r.expires_at > {{now}} - $1)
		LIMIT $2)
	AND expires_at <= {{now}} - $1`)
	}
	return q
}

// stepArgs are save's arguments, or false for an owner that holds nothing.
func stepArgs(owner idem.Owner, name string, result []byte) ([]any, error) {
	if err := step.CheckName(name); err != nil {
		return nil, err
	}
	args, ok := ownerArgs(owner)
	if !ok {
		return nil, idem.ErrLeaseLost
	}
	if result == nil {
		result = []byte{}
	}
	return append(args, int64(owner.Fence), name, result), nil
}

// SaveStep implements step.Store: one INSERT … SELECT that reads the
// owner's record under a share lock and upserts the point.
func (s *Store) SaveStep(ctx context.Context, owner idem.Owner, name string, result []byte) error {
	args, err := stepArgs(owner, name, result)
	if err != nil {
		return err
	}
	return s.owned(ctx, s.db, "save step", s.sq.save, args)
}

// SaveStepTx stores a step's recovery point inside the caller's
// transaction tx, so that a local step's writes and its recovery point
// commit together or not at all: the step is exactly once. It reads the
// owner's record with a share lock held until tx ends (a takeover waits
// for the commit, and a retry then finds the step finished, or, after a
// rollback, runs it), and returns idem.ErrLeaseLost when owner no longer
// holds the claim: roll back. The rules of CompleteTx apply: tx on the
// Store's database, shorter than the lease, a failed Commit an unknown
// outcome that the retry settles.
func (s *Store) SaveStepTx(ctx context.Context, tx Execer, owner idem.Owner, name string, result []byte) error {
	if tx == nil {
		return configError("tx", "nil Execer")
	}
	args, err := stepArgs(owner, name, result)
	if err != nil {
		return err
	}
	return s.owned(ctx, tx, "save step", s.sq.saveTx, args)
}

// StepTx returns SaveStepTx bound to tx, for step.Step.SaveWith.
func (s *Store) StepTx(tx Execer) step.SaveFunc {
	return func(ctx context.Context, owner idem.Owner, name string, result []byte) error {
		return s.SaveStepTx(ctx, tx, owner, name, result)
	}
}

// Steps implements step.Store: one statement on PostgreSQL and SQLite; on
// MySQL, which has no UPDATE … RETURNING, a read, and an UPDATE when the
// record was re-acquired since the points were saved (a resume after a
// release or a takeover).
func (s *Store) Steps(ctx context.Context, owner idem.Owner) (map[string][]byte, error) {
	args, ok := ownerArgs(owner)
	if !ok {
		return nil, idem.ErrLeaseLost
	}
	args = append(args, int64(owner.Fence))
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.sq.load.sql, s.sq.load.args(args...)...)
	if err != nil {
		return nil, fail(ctx, "load steps", err)
	}
	defer rows.Close()
	out := make(map[string][]byte)
	var (
		found                    bool
		created, expires, behind int64
		name                     sql.NullString
		result                   []byte
		pointExpires             sql.NullInt64
	)
	for rows.Next() {
		result = nil
		switch s.cfg.Dialect {
		case MySQL:
			err = rows.Scan(&created, &expires, &name, &result, &pointExpires)
			if pointExpires.Valid && pointExpires.Int64 < expires {
				behind++ // saved or loaded by an earlier record of the operation
			}
		default:
			err = rows.Scan(&name, &result)
		}
		if err != nil {
			return nil, fail(ctx, "load steps", err)
		}
		found = true
		if name.Valid {
			out[name.String] = result
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fail(ctx, "load steps", err)
	}
	if s.cfg.Dialect == Postgres && !found {
		return nil, idem.ErrLeaseLost
	}
	if behind > 0 {
		if _, err := s.db.ExecContext(ctx, s.sq.refresh.sql, s.sq.refresh.args(args[0], created, expires)...); err != nil {
			return nil, fail(ctx, "load steps", err)
		}
	}
	if s.cfg.Dialect == MySQL && !found {
		return nil, idem.ErrLeaseLost
	}
	return out, nil
}

// purgeSteps deletes, batch rows per statement, the points that expired
// at least grace ago and belong to no record that is live by then.
func (s *Store) purgeSteps(ctx context.Context, grace int64, batch int) error {
	for {
		res, err := s.db.ExecContext(ctx, s.sq.purge.sql, s.sq.purge.args(grace, int64(batch))...)
		if err != nil {
			if serializationFailure(err) && s.lostRace(ctx, err) {
				continue
			}
			return fail(ctx, "purge steps", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fail(ctx, "purge steps", err)
		}
		if n < int64(batch) {
			return nil
		}
	}
}
