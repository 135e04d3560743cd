// Package fsm runs one-directional state machines over a SQL table, one
// conditional UPDATE per transition.
//
// A payment callback arrives three times; a "ship" message is redelivered
// after a rebalance; two workers pick up the same order. With a state machine
// each of them is one statement,
//
//	UPDATE orders SET status = 'PAID', version = version + 1
//	WHERE id = 42 AND status IN ('CREATED')
//
// and the database, not the application, decides who wins: one row affected
// means this call moved the order; zero means it did not, and one read tells
// why. Either the order is already PAID, or in a state only reachable through
// PAID: the call is a duplicate and answered with success and the current row
// ("duplicates are friendly"). Or the order is somewhere it should not be: that
// is an anomaly, returned as ErrIllegalTransition and handed to an alert hook
// ("anomalies are explicit"). Telling the two apart is the point of this
// package.
//
// # Declaring a machine
//
// A Definition lists the states, the initial state and the named transitions.
// New refuses a cycle (states only move forward), a state the initial state
// cannot reach, and a transition naming an undeclared state. Only declared
// transitions can run, so there is no jump path from PAID to SHIPPED around a
// check. The order machine of the examples, as printed by Machine.Mermaid:
//
//	stateDiagram-v2
//	    [*] --> CREATED
//	    CREATED --> PAID: pay
//	    PAID --> SHIPPED: ship
//	    SHIPPED --> DELIVERED: deliver
//	    CREATED --> CANCELLED: cancel
//	    PAID --> CANCELLED: cancel
//	    DELIVERED --> [*]
//	    CANCELLED --> [*]
//
// The table needs an id column that is unique, a text status column and an
// integer version column (names configurable in Config). Rows are inserted by
// the application in Machine.Initial's state. Table and column names must be
// plain identifiers; they are checked by New and written unquoted.
//
// # Firing a transition
//
// Machine.Fire runs one transition and returns a Result (Applied or Duplicate,
// with the row's state and version) or an error:
//
//   - Applied: the UPDATE changed the row. One statement, nothing else.
//   - Duplicate: the row is at the target, or beyond it. Beyond means every
//     path from the initial state to the row's state passes through the
//     target, so the transition provably happened before. CANCELLED is
//     reachable from PAID but also straight from CREATED, so "pay" on a
//     cancelled order is illegal, not a duplicate: it may be money arriving
//     for an order that was never paid.
//   - *IllegalTransitionError (errors.Is ErrIllegalTransition): any other
//     state, including one the Definition does not know. Config.OnIllegalFunc
//     is called first.
//   - *StaleVersionError (ErrStaleVersion): Options.Version was given (the
//     version the caller read; zero is a version like any other), the row is
//     still in a source state but its version moved. The guard closes the ABA
//     hole where a row moved on and a decision taken on an old read would
//     still find a source state. Fire does not retry it: the caller must read
//     again and decide again.
//   - ErrLostRace: without a version guard, the row was in a source state when
//     read although the UPDATE had just missed it (it moved between the two
//     statements). Fire runs the UPDATE again, up to Config.MaxAttempts.
//   - ErrNotFound: no row with this id.
//
// The read after a miss only classifies; it never decides. Extra columns
// (paid_at, a tracking number) go into the same UPDATE through Options.Set, so
// they are written exactly when the transition applies. Set keys are plain
// identifiers and are compared with the id, status, version and fence
// columns ignoring case, as the database does for unquoted names: on MySQL
// and SQLite a second assignment "STATUS = …" would otherwise win over
// Fire's own and void the guard.
//
// # Fenced transitions
//
// A transition run by the holder of a distributed lock (package lock) can be
// made conditional on the lease's fencing token, so that a holder whose lock
// was lost (it paused, its Redis went away, its lock expired and another
// holder took it) cannot move the state machine any more. Give the table a
// fence column, name it in Config.FenceColumn, and pass the fence:
//
//	m, _ := fsm.New(fsm.Postgres, "orders", def, &fsm.Config{FenceColumn: "fence"})
//	err := lock.Do(ctx, locker, "order:42", func(ctx context.Context, fence lock.Fence) error {
//		_, err := m.Fire(ctx, db, 42, "ship", &fsm.Options{Fence: fence})
//		return err
//	})
//
// The UPDATE then also requires fence <= Options.Fence and writes the fence:
//
//	UPDATE orders SET status = 'SHIPPED', version = version + 1, fence = 17
//	WHERE id = 42 AND status IN ('PAID') AND fence <= 17
//
// A row carrying a newer fence makes Fire return a *lock.StaleFenceError
// (errors.Is lock.ErrStaleFence), whatever state the row is in, never
// Duplicate: the caller's lease is gone and it must stop. One holder may fire
// several transitions with its fence. Tested with a Redis lock really lost
// (its connection black-holed until it expired, a second holder acquiring),
// on every dialect: the first holder's cancel of the paid order is refused.
//
// # Transactions and dialects
//
// Fire takes an Executor: *sql.DB, *sql.Conn or the caller's *sql.Tx, so the
// transition commits or rolls back together with the business change, the
// inbox record or the outbox message of the same unit of work.
//
// The Dialect picks placeholders and how the new version comes back in the
// same statement: UPDATE … RETURNING on PostgreSQL and SQLite (≥ 3.35);
// version = LAST_INSERT_ID(version + 1) on MySQL and MariaDB, read from the OK
// packet. The latter sets the session's LAST_INSERT_ID() as a side effect;
// read an INSERT's id from its own sql.Result, as usual, not with a later
// SELECT LAST_INSERT_ID(). MySQL reports changed rows, not matched rows, unless
// the DSN sets clientFoundRows=true; the UPDATE always changes status and
// version, so the two counts are equal and either DSN works. On MySQL the
// classifying read is a locking read (LOCK IN SHARE MODE): in a REPEATABLE READ
// transaction a plain SELECT would see the transaction's old snapshot while
// the UPDATE saw the latest row. On SQLite a transaction that read the row
// before another connection changed it cannot write at all
// (SQLITE_BUSY_SNAPSHOT, "database is locked"); Fire returns that error and
// the caller retries the transaction. Likewise in a PostgreSQL REPEATABLE READ
// or SERIALIZABLE transaction, a row changed since the snapshot makes the
// UPDATE fail with a serialization error (SQLSTATE 40001), returned wrapped:
// retry the transaction.
//
// # Guarantees
//
// Crash: a transition is one statement, so it is in the database or not.
// A process killed inside its transaction leaves nothing behind (the database
// rolls back), and a process killed after its commit but before answering
// leaves a row the retry sees as a duplicate. Both are tested by killing a
// real process.
//
// Outage: a database error is returned wrapped, never classified as a
// duplicate or retried. When the commit's acknowledgement is lost the outcome
// is unknown to the caller; firing again answers Applied or Duplicate, which
// is the point.
//
// Clock jump: nothing here reads a clock.
//
// Store restart, snapshot restore, failover: the state, the version and the
// fence live in the row, as durable as the database makes them. A committed
// transition survives a restart. A transition whose commit was lost with a
// crash or with a failover to a replica that had not received it is simply
// not there: firing again applies it (the retry is the point of idempotent
// transitions). A restore from an older backup moves rows back to older
// states; Fire then answers from what the database holds, so a transition
// that had happened before the restore can be applied again: effects outside
// the database that followed it (a payment captured, a parcel shipped) are
// not rolled back with it. A fence stored in the row goes back with the row,
// so after such a restore fenced transitions order holders only from the
// restored fence on.
//
// Not promised: that writers outside the machine respect it. Anything that
// updates the status column directly can create states Fire will report as
// illegal; a CHECK constraint on the status values is a cheap backstop.
// Concurrency is settled by the row lock of the UPDATE: N callers firing the
// same transition get one Applied and N−1 Duplicate.
package fsm
