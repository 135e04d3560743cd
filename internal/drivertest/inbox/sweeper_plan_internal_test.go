package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/drivertest/sqlenv"
	"github.com/idemkit/idem/internal/testenv"
)

// oldPostgresSweep is the sweep statement before the cutoff was computed once
// per statement: kept as the baseline of the plan test and the benchmark.
func oldPostgresSweep(table string) string {
	return `DELETE FROM ` + table + ` WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM ` + table +
		` WHERE created_at < clock_timestamp() - $1::bigint * interval '1 microsecond' ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)`
}

// sweepTable creates a migrated PostgreSQL inbox holding rows fresh dedup rows.
// sweepSQL is the statement a Sweeper of ib sends: one Sweep on a
// sqlenv.Recorder, which keeps it and runs nothing.
func sweepSQL(tb testing.TB, ib *inbox.Inbox) string {
	tb.Helper()
	r := sqlenv.NewRecorder()
	defer r.DB.Close()
	rib, err := inbox.New(r.DB, &inbox.Config{Dialect: inbox.Postgres, Table: ib.Table()})
	if err != nil {
		tb.Fatal(err)
	}
	sw, err := inbox.NewSweeper(rib, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := sw.Sweep(context.Background()); !errors.Is(err, sqlenv.ErrRecorded) {
		tb.Fatalf("Sweep on a recorder: %v, want sqlenv.ErrRecorded", err)
	}
	return r.Statements()[0]
}

func sweepTable(tb testing.TB, rows int) (*inbox.Inbox, *sql.DB) {
	tb.Helper()
	db, _ := testenv.PostgresDB(tb)
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: testenv.Name("inbox")})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := ib.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO `+ib.Table()+` (consumer, message_id, created_at)
		SELECT 'c', 'm' || g, clock_timestamp() FROM generate_series(1, $1::int) g`, rows); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+ib.Table()); err != nil {
		tb.Fatal(err)
	}
	return ib, db
}

// planNode is the part of EXPLAIN (ANALYZE, FORMAT JSON) the test reads.
type planNode struct {
	NodeType      string     `json:"Node Type"`
	IndexName     string     `json:"Index Name"`
	IndexCond     string     `json:"Index Cond"`
	Filter        string     `json:"Filter"`
	ActualRows    float64    `json:"Actual Rows"`
	RemovedByFilt float64    `json:"Rows Removed by Filter"`
	Plans         []planNode `json:"Plans"`
}

func explainSweep(t *testing.T, db *sql.DB, stmt string, age int64) []planNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() // EXPLAIN ANALYZE runs the DELETE
	var out string
	if err := tx.QueryRowContext(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+stmt, age, 1000).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %q: %v", out, err)
	}
	var nodes []planNode
	var walk func(n planNode)
	walk = func(n planNode) {
		nodes = append(nodes, n)
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plans[0].Plan)
	return nodes
}

// TestSweepPlanUsesIndex: on PostgreSQL, a sweep pass with nothing to delete
// (50,000 fresh rows, retention one hour) finds the boundary through the
// created_at index — an index condition, zero rows read — instead of reading
// every index entry and filtering it. The old statement's plan is checked
// alongside, so the test proves it can tell the two apart.
func TestSweepPlanUsesIndex(t *testing.T) {
	t.Parallel()
	ib, db := sweepTable(t, 50_000)
	age := time.Hour.Microseconds()
	idx := ib.Table() + "_created_at_idx"

	read := func(nodes []planNode) (cond bool, scanned float64, filters []string) {
		for _, n := range nodes {
			if n.IndexName == idx && strings.Contains(n.IndexCond, "created_at <") {
				cond = true
			}
			if strings.Contains(n.Filter, "created_at") {
				filters = append(filters, n.Filter)
			}
			if strings.Contains(n.NodeType, "Scan") {
				scanned += n.ActualRows + n.RemovedByFilt
			}
		}
		sort.Strings(filters)
		return cond, scanned, filters
	}

	cond, scanned, filters := read(explainSweep(t, db, sweepSQL(t, ib), age))
	if !cond || len(filters) > 0 || scanned != 0 {
		t.Fatalf("sweep plan: index condition on %s %v, rows read %v, filters %q; want the index condition, 0 rows, no filter", idx, cond, scanned, filters)
	}
	oldCond, oldScanned, _ := read(explainSweep(t, db, oldPostgresSweep(ib.Table()), age))
	if oldCond || oldScanned < 50_000 {
		t.Fatalf("baseline plan: index condition %v, rows read %v; the test no longer tells a filter from an index condition", oldCond, oldScanned)
	}
}
