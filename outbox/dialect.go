package outbox

import (
	"fmt"
	"slices"
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
	markSent        string // prefix; the seq list follows
	retry           string // delay µs, reason, seq
	park            string // reason, seq
	finished        string // limit → seq, ordering_key of finished heads
	lockKeys        string // prefix; the ordering keys follow
	nextHead        string // one key's lowest open message(s) → ordering_key, seq, key_seq
	lag             string // → µs since the oldest pending message was enqueued
	pending         string // → the number of pending messages
	sweep           string // age µs, limit
	lease           string // holder, lease µs (SQLite)
	parked          string // limit
	requeue         string // id
	discard         string // id
	get             string // id
	table           string
	arrays          bool   // PostgreSQL: the advance statements take array parameters
	castInt         string // CAST(%s AS <the dialect's 64-bit integer>)
	placeholder     func(int) string
}

func buildStatements(d Dialect, t string) statements {
	var s statements
	s.placeholder = d.Placeholder
	s.table = t
	s.arrays = d == Postgres
	p := d.Placeholder
	name := t[strings.LastIndexByte(t, '.')+1:]
	cols := `id, destination, ordering_key, key_seq, payload, headers, created_us, next_us, head`
	switch d {
	case Postgres:
		s.now = `(extract(epoch from clock_timestamp()) * 1000000)::bigint`
		s.castInt = `CAST(%s AS bigint)`
	case MySQL:
		s.now = `CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)`
		s.castInt = `CAST(%s AS SIGNED)`
	default:
		s.now = `CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)`
		s.castInt = `CAST(%s AS INTEGER)`
	}
	now := s.now
	// A message without a key is its own head. A keyed message is its
	// key's head when its key_seq is the key's head_seq: nothing earlier
	// of its key is open. Enqueue reads head_seq from the key's row, which
	// it has just locked (the latest version, in any isolation level).
	s.insertUnordered = `INSERT INTO ` + t + ` (` + cols + `) VALUES (` + p(1) + `, ` + p(2) + `, '', 0, ` + p(3) + `, ` + p(4) + `, ` + now + `, ` + now + `, 1)`
	switch d {
	case Postgres:
		s.insertOrdered = `WITH k AS (INSERT INTO ` + t + `_keys AS k0 (ordering_key, last_seq, head_seq) VALUES ($3, 1, 1)` +
			` ON CONFLICT (ordering_key) DO UPDATE SET last_seq = k0.last_seq + 1 RETURNING last_seq, head_seq)` +
			` INSERT INTO ` + t + ` (` + cols + `) SELECT $1, $2, $3, k.last_seq, $4, $5, ` + now + `, ` + now +
			`, CASE WHEN k.last_seq = k.head_seq THEN 1 ELSE 0 END FROM k`
	case MySQL:
		s.bumpKey = `INSERT INTO ` + t + `_keys (ordering_key, last_seq, head_seq) VALUES (?, 1, 1) ON DUPLICATE KEY UPDATE last_seq = last_seq + 1`
	default:
		s.bumpKey = `INSERT INTO ` + t + `_keys (ordering_key, last_seq, head_seq) VALUES (?, 1, 1) ON CONFLICT (ordering_key) DO UPDATE SET last_seq = last_seq + 1`
	}
	if d != Postgres {
		s.insertOrdered = `INSERT INTO ` + t + ` (` + cols + `) SELECT ?, ?, ?, last_seq, ?, ?, ` + now + `, ` + now +
			`, CASE WHEN last_seq = head_seq THEN 1 ELSE 0 END FROM ` + t + `_keys WHERE ordering_key = ?`
	}

	// The claim reads the heads only (issue 35 §3b): the index of pending
	// heads holds one row per busy key however long its backlog, so a
	// claim costs the same behind 100,000 messages of one key as behind
	// one. Finding a key's head with a subquery per candidate row (or an
	// anti-join the planner picks from stale statistics) walked the whole
	// backlog on every pass. PostgreSQL's partial index has exactly the
	// claim's condition; MySQL and SQLite are told the index.
	//
	// The head flag is the ordering rule, not a filter: it is a column of
	// the locked row itself, which a locking read sees in its latest
	// committed version (InnoDB) or re-checks (PostgreSQL), so no
	// dialect's snapshot rules can hand over a key's second message.
	from := t + ` m`
	switch d {
	case MySQL:
		from += ` FORCE INDEX (` + name + `_claim_idx)`
	case SQLite:
		from += ` INDEXED BY ` + name + `_claim_idx`
	}
	s.claim = `SELECT m.seq, m.id, m.destination, m.ordering_key, m.payload, m.headers, m.attempts FROM ` + from +
		` WHERE m.state = 0 AND m.head = 1 AND m.next_us <= ` + now + ` ORDER BY m.seq LIMIT ` + p(1)
	if d != SQLite {
		s.claim += ` FOR UPDATE SKIP LOCKED`
	}
	// The outcomes. On PostgreSQL and MySQL the relay holds the claimed
	// rows' locks, so nothing else changed them: the rows are found by
	// primary key alone. (A condition on state let MariaDB scan the state
	// index and wait for rows another relay had locked.) On SQLite,
	// without locks, state = 0 keeps an operator's Discard.
	guard := ``
	if d == SQLite {
		guard = `state = 0 AND `
	}
	// A sent keyed message stays head = 1 (a finished head) until its
	// key's head has moved on (Relay.advance); an unordered one is done.
	s.markSent = `UPDATE ` + t + ` SET state = 1, attempts = attempts + 1, done_us = ` + now + `, reason = NULL,` +
		` head = CASE WHEN ordering_key = '' THEN 0 ELSE head END WHERE ` + guard + `seq IN (`
	s.retry = `UPDATE ` + t + ` SET attempts = attempts + 1, next_us = ` + now + ` + ` + p(1) + `, reason = ` + p(2) + ` WHERE ` + guard + `seq = ` + p(3)
	s.park = `UPDATE ` + t + ` SET state = 2, attempts = attempts + 1, reason = ` + p(1) + ` WHERE ` + guard + `seq = ` + p(2)
	fin := t
	switch d {
	case MySQL:
		fin += ` FORCE INDEX (` + name + `_claim_idx)`
	case SQLite:
		fin += ` INDEXED BY ` + name + `_advance_idx`
	}
	s.finished = `SELECT seq, ordering_key FROM ` + fin + ` WHERE head = 1 AND state IN (1, 3) ORDER BY seq LIMIT ` + p(1)
	// The keys' rows are locked as Enqueue locks them, so that no
	// transaction enqueues for a key while its head moves on (the next
	// head is then read from committed rows, all of them); a key whose
	// row a business transaction holds is skipped, never waited for (a
	// relay waiting on a business transaction, which may take several
	// keys in any order, could deadlock with it), and moved on later.
	s.lockKeys = `SELECT ordering_key, last_seq FROM ` + t + `_keys WHERE ordering_key IN (`
	// A key's lowest open message, through the key index: the next head,
	// or the head already (a parked head, when an operator discarded a
	// message behind it). {key} stands for the key's placeholder and {n} makes the aliases unique. MySQL's
	// key index is (ordering_key, state, key_seq), so each state is one
	// ordered probe there; the relay takes the lower.
	s.nextHead = `SELECT * FROM (SELECT ordering_key, seq, key_seq FROM ` + t + ` WHERE ordering_key = {key} AND state IN (0, 2) ORDER BY key_seq LIMIT 1) x{n}`
	if d == MySQL {
		s.nextHead = `SELECT * FROM (SELECT ordering_key, seq, key_seq FROM ` + t + ` WHERE ordering_key = {key} AND state = 0 ORDER BY key_seq LIMIT 1) x{n}` +
			` UNION ALL SELECT * FROM (SELECT ordering_key, seq, key_seq FROM ` + t + ` WHERE ordering_key = {key} AND state = 2 ORDER BY key_seq LIMIT 1) y{n}`
	}
	s.lag = `SELECT ` + now + ` - created_us FROM ` + t + ` WHERE state = 0 ORDER BY seq LIMIT 1`
	if d == MySQL {
		s.lag = `SELECT ` + now + ` - created_us FROM ` + t + ` WHERE state = 0 ORDER BY state, seq LIMIT 1`
	}
	s.pending = `SELECT COUNT(*) FROM ` + t + ` WHERE state = 0`
	// A finished head is kept until its key has moved on.
	switch d {
	case Postgres:
		// statement_timestamp() is STABLE, so the cutoff is an index
		// condition (clock_timestamp() would be re-read for every row).
		s.sweep = `DELETE FROM ` + t + ` WHERE seq IN (SELECT seq FROM ` + t + ` WHERE done_us < (extract(epoch from statement_timestamp()) * 1000000)::bigint - $1 AND head = 0 ORDER BY done_us LIMIT $2 FOR UPDATE SKIP LOCKED)`
	case MySQL:
		s.sweep = `DELETE FROM ` + t + ` WHERE done_us < ` + now + ` - ? AND head = 0 ORDER BY done_us LIMIT ?`
	default:
		s.sweep = `DELETE FROM ` + t + ` WHERE seq IN (SELECT seq FROM ` + t + ` WHERE done_us < ` + now + ` - ? AND head = 0 ORDER BY done_us LIMIT ?)`
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
	// A discarded keyed message becomes a finished head whether or not it
	// was its key's head: the relay then moves the key's head to its
	// lowest pending message, which is right in either case.
	s.discard = `UPDATE ` + t + ` SET state = 3, done_us = ` + now + `, head = CASE WHEN ordering_key = '' THEN 0 ELSE 1 END WHERE state IN (0, 2) AND id = ` + p(1)
	return s
}

// markSentQuery returns markSent for n seqs, its placeholders from 1.
func (s *statements) markSentQuery(n int) string { return s.inList(s.markSent, n) }

// On PostgreSQL the statements that move heads on have one text whatever
// the number of keys (array parameters, passed as array literals so that
// any driver can send them), so that a driver that caches statements
// (pgx) prepares each once per connection, and no pass sends a new text
// to parse and plan: a UNION ALL of a few hundred probes cost more to plan
// than to run (relay throughput through NATS fell to a sixth).

// lockKeysFor returns lockKeys for keys and its arguments.
func (s *statements) lockKeysFor(keys []string, skipLocked bool) (string, []any) {
	var q string
	var args []any
	if s.arrays {
		q = `SELECT ordering_key, last_seq FROM ` + s.table + `_keys WHERE ordering_key = ANY($1::text[])`
		args = []any{textArray(keys)}
	} else {
		q = s.inList(s.lockKeys, len(keys))
		for _, k := range keys {
			args = append(args, k)
		}
	}
	q += ` ORDER BY ordering_key`
	if skipLocked {
		q += ` FOR UPDATE SKIP LOCKED`
	}
	return q, args
}

// nextHeadsFor returns nextHead for each of keys, joined with UNION ALL
// (on PostgreSQL one lateral probe per element of an array), and its
// arguments.
func (s *statements) nextHeadsFor(keys []string) (string, []any) {
	if s.arrays {
		return `SELECT h.ordering_key, h.seq, h.key_seq FROM unnest($1::text[]) AS u(k) CROSS JOIN LATERAL (SELECT e.ordering_key, e.seq, e.key_seq FROM ` + s.table +
			` e WHERE e.ordering_key = u.k AND e.state IN (0, 2) ORDER BY e.key_seq LIMIT 1) h`, []any{textArray(keys)}
	}
	var b strings.Builder
	var args []any
	parts := strings.Split(s.nextHead, "{key}")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		for j, part := range parts {
			if j > 0 {
				args = append(args, k)
				b.WriteString(s.placeholder(len(args)))
			}
			b.WriteString(strings.ReplaceAll(part, "{n}", strconv.Itoa(i)))
		}
	}
	return b.String(), args
}

// promoteFor returns the UPDATE that makes each of next (a key's lowest
// open message) its key's head, if it is still pending, and ends the head
// of each of done (finished heads whose keys have moved on), with its
// arguments. A next message that was finished meanwhile (another relay
// marked it sent while this one read) keeps its flag: it is a finished
// head, and its key moves on later.
func (s *statements) promoteFor(next, done []int64) (string, []any) {
	if s.arrays {
		return `UPDATE ` + s.table + ` SET head = CASE WHEN state = 0 THEN 1 WHEN seq = ANY($1::bigint[]) THEN head ELSE 0 END WHERE seq = ANY($2::bigint[])`,
			[]any{intArray(next), intArray(append(slices.Clone(next), done...))}
	}
	var b strings.Builder
	var args []any
	b.WriteString(`UPDATE ` + s.table + ` SET head = CASE WHEN state = 0 THEN 1`)
	list := func(seqs []int64) {
		for j, seq := range seqs {
			if j > 0 {
				b.WriteString(", ")
			}
			args = append(args, seq)
			b.WriteString(s.placeholder(len(args)))
		}
	}
	if len(next) > 0 {
		b.WriteString(` WHEN seq IN (`)
		list(next)
		b.WriteString(`) THEN head`)
	}
	b.WriteString(` ELSE 0 END WHERE seq IN (`)
	list(next)
	if len(next) > 0 && len(done) > 0 {
		b.WriteString(", ")
	}
	list(done)
	b.WriteByte(')')
	return b.String(), args
}

// headSeqFor returns the UPDATE setting keys[i]'s head_seq to seqs[i],
// with its arguments.
func (s *statements) headSeqFor(keys []string, seqs []int64) (string, []any) {
	if s.arrays {
		return `UPDATE ` + s.table + `_keys SET head_seq = ($2::bigint[])[array_position($1::text[], ordering_key)] WHERE ordering_key = ANY($1::text[])`,
			[]any{textArray(keys), intArray(seqs)}
	}
	var b strings.Builder
	var args []any
	b.WriteString(`UPDATE ` + s.table + `_keys SET head_seq = CASE ordering_key`)
	for i, k := range keys {
		args = append(args, k, seqs[i])
		b.WriteString(` WHEN ` + s.placeholder(len(args)-1) + ` THEN ` + fmt.Sprintf(s.castInt, s.placeholder(len(args))))
	}
	b.WriteString(` ELSE head_seq END WHERE ordering_key IN (`)
	for j, k := range keys {
		if j > 0 {
			b.WriteString(", ")
		}
		args = append(args, k)
		b.WriteString(s.placeholder(len(args)))
	}
	b.WriteByte(')')
	return b.String(), args
}

// textArray is a PostgreSQL array literal of ss, each element quoted.
func textArray(ss []string) string {
	return pgArray(ss, func(b *strings.Builder, v string) {
		b.WriteByte('"')
		for _, r := range v {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	})
}

// intArray is a PostgreSQL array literal of ns.
func intArray(ns []int64) string {
	return pgArray(ns, func(b *strings.Builder, n int64) { b.WriteString(strconv.FormatInt(n, 10)) })
}

func pgArray[T any](xs []T, elem func(*strings.Builder, T)) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(',')
		}
		elem(&b, x)
	}
	b.WriteByte('}')
	return b.String()
}

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
