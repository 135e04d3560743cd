package shop

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem/fsm"
)

// Dialect is the SQL dialect of the shop's database: fsm.SQLite or
// fsm.Postgres (the same values as inbox, sqlstore and sqltoken use).
type Dialect = fsm.Dialect

// rebind turns the ? placeholders of q into $n for PostgreSQL.
func rebind(d Dialect, q string) string {
	if d != fsm.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// schema returns the shop's tables (the outbox's come from package outbox's
// migrations, see openStack). The unique indexes are the correctness
// backstops; variants that break a rule drop theirs (see Variant).
func schema(v Variant) []string {
	s := []string{
		`CREATE TABLE IF NOT EXISTS stock (
			sku   TEXT PRIMARY KEY,
			qty   BIGINT NOT NULL,
			fence BIGINT NOT NULL DEFAULT 0,
			initial BIGINT NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS orders (
			id          TEXT PRIMARY KEY,
			request_id  TEXT NOT NULL,
			customer    TEXT NOT NULL,
			sku         TEXT NOT NULL,
			qty         BIGINT NOT NULL,
			amount      BIGINT NOT NULL,
			status      TEXT NOT NULL,
			version     BIGINT NOT NULL DEFAULT 0,
			trade_no    TEXT,
			pay_key     TEXT,
			paid_amount BIGINT NOT NULL DEFAULT 0,
			refunded    BIGINT NOT NULL DEFAULT 0,
			tracking    TEXT,
			CHECK (refunded >= 0)
		)`,
		`CREATE TABLE IF NOT EXISTS payments (
			id       TEXT PRIMARY KEY,
			trade_no TEXT NOT NULL,
			order_id TEXT NOT NULL,
			amount   BIGINT NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS refunds (
			refund_no TEXT PRIMARY KEY,
			order_id  TEXT NOT NULL,
			amount    BIGINT NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS shipments (
			id       TEXT PRIMARY KEY,
			order_id TEXT NOT NULL,
			tracking TEXT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS payments_order ON payments (order_id)`,
		`CREATE INDEX IF NOT EXISTS shipments_order ON shipments (order_id)`,
	}
	if v != CheckThenAct && v != FrontendOnly {
		// One order per client request_id: the backstop that also holds
		// for a client that bypasses every other layer.
		s = append(s, `CREATE UNIQUE INDEX IF NOT EXISTS orders_request_id ON orders (request_id)`)
	}
	if v != LockWithoutConstraint {
		// Stock never goes negative, whatever the lock did.
		s[0] = strings.Replace(s[0], "qty   BIGINT NOT NULL,", "qty   BIGINT NOT NULL CHECK (qty >= 0),", 1)
	}
	if v != ShortTTL {
		// One payment per channel trade number.
		s = append(s, `CREATE UNIQUE INDEX IF NOT EXISTS payments_trade_no ON payments (trade_no)`)
	}
	return s
}

// migrate creates the shop's tables and stocks the SKUs.
func migrate(ctx context.Context, db *sql.DB, d Dialect, v Variant, stock map[string]int64) error {
	for _, q := range schema(v) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("shop schema: %w", err)
		}
	}
	for sku, n := range stock {
		q := `INSERT INTO stock (sku, qty, initial) VALUES (?, ?, ?) ON CONFLICT (sku) DO NOTHING`
		if _, err := db.ExecContext(ctx, rebind(d, q), sku, n, n); err != nil {
			return fmt.Errorf("shop stock: %w", err)
		}
	}
	return nil
}

// isCheckViolation reports a CHECK constraint failure (stock below zero).
func isCheckViolation(err error) bool {
	if err == nil {
		return false
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "check constraint") || strings.Contains(s, "23514")
}
