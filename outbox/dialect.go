package outbox

import (
	"strconv"
	"strings"
)

// State is where a message is in its life. The values are stored.
type State int

// The states of a message.
const (
	Pending   State = 0 // committed, not yet confirmed by the broker
	Sent      State = 1 // the broker confirmed it
	Parked    State = 2 // the broker refused it for good: it waits for an operator
	Discarded State = 3 // an operator gave it up
)

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Sent:
		return "sent"
	case Parked:
		return "parked"
	case Discarded:
		return "discarded"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// statements are the SQL texts of one Outbox, built once in New.
type statements struct {
	now             string // the database clock in Unix microseconds
	insertUnordered string // id, destination, payload, headers
	bumpKey         string // ordering_key ("" on PostgreSQL: insertOrdered does it)
	insertOrdered   string // id, destination, ordering_key, payload, headers[, ordering_key]
	claim           string // limit; FOR UPDATE SKIP LOCKED except on SQLite
	notHeads        string // prefix; the claimed keyed seqs follow
	markSent        string // prefix; the seq list follows
	retry           string // delay µs, reason, seq
	park            string // reason, seq
	lag             string // → µs since the oldest pending message was enqueued
	pending         string // → the number of pending messages
	sweep           string // age µs, limit
	lease           string // holder, lease µs (SQLite)
	parked          string // limit
	requeue         string // id
	discard         string // id
	get             string // id
	placeholder     func(int) string
}

func buildStatements(d Dialect, t string) statements {
	var s statements
	s.placeholder = d.Placeholder
	p := d.Placeholder
	cols := `id, destination, ordering_key, key_seq, payload, headers, created_us, next_us`
	switch d {
	case Postgres:
		s.now = `(extract(epoch from clock_timestamp()) * 1000000)::bigint`
	case MySQL:
		s.now = `CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)`
	default:
		s.now = `CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)`
	}
	now := s.now
	s.insertUnordered = `INSERT INTO ` + t + ` (` + cols + `) VALUES (` + p(1) + `, ` + p(2) + `, '', 0, ` + p(3) + `, ` + p(4) + `, ` + now + `, ` + now + `)`
	switch d {
	case Postgres:
		s.insertOrdered = `WITH k AS (INSERT INTO ` + t + `_keys AS k0 (ordering_key, last_seq) VALUES ($3, 1)` +
			` ON CONFLICT (ordering_key) DO UPDATE SET last_seq = k0.last_seq + 1 RETURNING last_seq)` +
			` INSERT INTO ` + t + ` (` + cols + `) SELECT $1, $2, $3, k.last_seq, $4, $5, ` + now + `, ` + now + ` FROM k`
	case MySQL:
		s.bumpKey = `INSERT INTO ` + t + `_keys (ordering_key, last_seq) VALUES (?, 1) ON DUPLICATE KEY UPDATE last_seq = last_seq + 1`
	default:
		s.bumpKey = `INSERT INTO ` + t + `_keys (ordering_key, last_seq) VALUES (?, 1) ON CONFLICT (ordering_key) DO UPDATE SET last_seq = last_seq + 1`
	}
	if d != Postgres {
		s.insertOrdered = `INSERT INTO ` + t + ` (` + cols + `) SELECT ?, ?, ?, last_seq, ?, ?, ` + now + `, ` + now +
			` FROM ` + t + `_keys WHERE ordering_key = ?`
	}

	// The head of each ordering key: a pending message due now with no
	// earlier message of its key still open (pending or parked). The
	// subquery reads committed rows only, and an earlier message that
	// another relay has locked is still pending, so its successor waits.
	head := ` AND (m.ordering_key = '' OR NOT EXISTS (SELECT 1 FROM ` + t + ` e WHERE e.ordering_key = m.ordering_key AND e.state IN (0, 2) AND e.key_seq < m.key_seq))`
	if d == Postgres {
		// A correlated scalar subquery with LIMIT 1 stays a per-row probe
		// of the partial key index whatever the statistics say; PostgreSQL
		// may turn NOT EXISTS into an anti-join that, with a large backlog
		// behind one key and statistics taken while it filled the table,
		// compares each of the key's rows with all the others.
		head = ` AND (m.ordering_key = '' OR m.key_seq = (SELECT e.key_seq FROM ` + t + ` e WHERE e.ordering_key = m.ordering_key AND e.state IN (0, 2) ORDER BY e.key_seq LIMIT 1))`
	}
	s.claim = `SELECT m.seq, m.id, m.destination, m.ordering_key, m.payload, m.headers, m.attempts FROM ` + t + ` m` +
		` WHERE m.state = 0 AND m.next_us <= ` + now + head +
		` ORDER BY m.seq LIMIT ` + p(1)
	if d != SQLite {
		s.claim += ` FOR UPDATE SKIP LOCKED`
	}
	// The claim's subquery is not the ordering rule, only a filter: on
	// InnoDB a locking read sees rows committed during the statement while
	// its subquery reads the statement's older snapshot, so one claim can
	// return a key's first and second message (committed together), or a
	// successor whose predecessor another relay has locked. notHeads, a
	// plain read in a statement of its own after the claim (a fresh
	// snapshot in READ COMMITTED on every dialect, and SQLite has one
	// writer), names the claimed messages that still have an earlier open
	// message of their key; the pass drops them. The lookup is bound to
	// the claimed rows' primary keys and the key index.
	s.notHeads = `SELECT c.seq FROM ` + t + ` c WHERE EXISTS (SELECT 1 FROM ` + t + ` e WHERE e.ordering_key = c.ordering_key AND e.state IN (0, 2) AND e.key_seq < c.key_seq) AND c.seq IN (`
	// The outcomes. On PostgreSQL and MySQL the relay holds the claimed
	// rows' locks, so nothing else changed them: the rows are found by
	// primary key alone. (A condition on state let MariaDB scan the state
	// index and wait for rows another relay had locked.) On SQLite,
	// without locks, state = 0 keeps an operator's Discard.
	guard := ``
	if d == SQLite {
		guard = `state = 0 AND `
	}
	s.markSent = `UPDATE ` + t + ` SET state = 1, attempts = attempts + 1, done_us = ` + now + `, reason = NULL WHERE ` + guard + `seq IN (`
	s.retry = `UPDATE ` + t + ` SET attempts = attempts + 1, next_us = ` + now + ` + ` + p(1) + `, reason = ` + p(2) + ` WHERE ` + guard + `seq = ` + p(3)
	s.park = `UPDATE ` + t + ` SET state = 2, attempts = attempts + 1, reason = ` + p(1) + ` WHERE ` + guard + `seq = ` + p(2)
	s.lag = `SELECT ` + now + ` - created_us FROM ` + t + ` WHERE state = 0 ORDER BY seq LIMIT 1`
	if d == MySQL {
		s.lag = `SELECT ` + now + ` - created_us FROM ` + t + ` WHERE state = 0 ORDER BY state, seq LIMIT 1`
	}
	s.pending = `SELECT COUNT(*) FROM ` + t + ` WHERE state = 0`
	switch d {
	case Postgres:
		// statement_timestamp() is STABLE, so the cutoff is an index
		// condition (clock_timestamp() would be re-read for every row).
		s.sweep = `DELETE FROM ` + t + ` WHERE seq IN (SELECT seq FROM ` + t + ` WHERE done_us < (extract(epoch from statement_timestamp()) * 1000000)::bigint - $1 ORDER BY done_us LIMIT $2 FOR UPDATE SKIP LOCKED)`
	case MySQL:
		s.sweep = `DELETE FROM ` + t + ` WHERE done_us < ` + now + ` - ? ORDER BY done_us LIMIT ?`
	default:
		s.sweep = `DELETE FROM ` + t + ` WHERE seq IN (SELECT seq FROM ` + t + ` WHERE done_us < ` + now + ` - ? ORDER BY done_us LIMIT ?)`
	}
	if d == SQLite {
		s.lease = `INSERT INTO ` + t + `_lease AS l (name, holder, until_us) VALUES ('relay', ?, ` + now + ` + ?)` +
			` ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until_us = excluded.until_us` +
			` WHERE l.holder = excluded.holder OR l.until_us < ` + now
	}
	sel := `SELECT id, destination, ordering_key, state, attempts, created_us, COALESCE(reason, '') FROM ` + t
	s.parked = sel + ` WHERE state = 2 ORDER BY seq LIMIT ` + p(1)
	s.get = sel + ` WHERE id = ` + p(1)
	s.requeue = `UPDATE ` + t + ` SET state = 0, next_us = ` + now + ` WHERE state = 2 AND id = ` + p(1)
	s.discard = `UPDATE ` + t + ` SET state = 3, done_us = ` + now + ` WHERE state IN (0, 2) AND id = ` + p(1)
	return s
}

// markSentQuery returns markSent for n seqs, its placeholders from 1.
func (s *statements) markSentQuery(n int) string { return s.inList(s.markSent, n) }

// notHeadsQuery returns notHeads for n seqs, its placeholders from 1.
func (s *statements) notHeadsQuery(n int) string { return s.inList(s.notHeads, n) }

// inList returns prefix followed by n placeholders and ")".
func (s *statements) inList(prefix string, n int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.placeholder(i + 1))
	}
	b.WriteByte(')')
	return b.String()
}
