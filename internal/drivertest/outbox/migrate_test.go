package outbox_test

import (
	"testing"

	"github.com/idemkit/idem/outbox"
)

// TestMigrationBackfillsHeads: an outbox written before migration 002
// (no head flag) is upgraded in place: each key's lowest open message
// (pending or parked) becomes its head, every unordered open message is
// one, head_seq follows, and the relay then publishes in key order.
func TestMigrationBackfillsHeads(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b)
			ctx := ctxT(t)
			tb := f.table // unqualified: also the indexes' prefix
			// Back to the schema of migration 001.
			var undo []string
			switch b.dialect {
			case outbox.MySQL:
				undo = []string{`DROP INDEX ` + tb + `_claim_idx ON ` + tb}
			default:
				undo = []string{`DROP INDEX ` + tb + `_claim_idx`, `DROP INDEX ` + tb + `_advance_idx`}
			}
			undo = append(undo, `ALTER TABLE `+tb+` DROP COLUMN head`, `ALTER TABLE `+tb+`_keys DROP COLUMN head_seq`,
				`DELETE FROM `+tb+`_migrations WHERE version = 2`)
			for _, q := range undo {
				if _, err := f.db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			// Rows as the code before 002 wrote them: A: a1 sent, a2 and
			// a3 pending; B: b1 parked, b2 pending; C: c1 sent; u1
			// unordered and pending.
			cols := ` (id, destination, ordering_key, key_seq, payload, headers, created_us, next_us, state) VALUES `
			for _, q := range []string{
				`INSERT INTO ` + tb + cols + `('a1', 'd', 'A', 1, '', '{}', 0, 0, 1), ('a2', 'd', 'A', 2, '', '{}', 0, 0, 0), ('a3', 'd', 'A', 3, '', '{}', 0, 0, 0),` +
					` ('b1', 'd', 'B', 1, '', '{}', 0, 0, 2), ('b2', 'd', 'B', 2, '', '{}', 0, 0, 0), ('c1', 'd', 'C', 1, '', '{}', 0, 0, 1), ('u1', 'd', '', 0, '', '{}', 0, 0, 0)`,
				`INSERT INTO ` + tb + `_keys (ordering_key, last_seq) VALUES ('A', 3), ('B', 2), ('C', 1)`,
			} {
				if _, err := f.db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := f.ob.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			heads := map[string]int{}
			rows, err := f.db.QueryContext(ctx, `SELECT id, head FROM `+tb)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id string
				var h int
				if err := rows.Scan(&id, &h); err != nil {
					t.Fatal(err)
				}
				heads[id] = h
			}
			rows.Close()
			want := map[string]int{"a1": 0, "a2": 1, "a3": 0, "b1": 1, "b2": 0, "c1": 0, "u1": 1}
			for id, h := range want {
				if heads[id] != h {
					t.Errorf("%s: head %d, want %d (all: %v)", id, heads[id], h, heads)
				}
			}
			for k, want := range map[string]int64{"A": 2, "B": 1, "C": 2} {
				var got int64
				if err := f.db.QueryRowContext(ctx, `SELECT head_seq FROM `+tb+`_keys WHERE ordering_key = `+b.dialect.Placeholder(1), k).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("key %s: head_seq %d, want %d", k, got, want)
				}
			}
			// The relay carries on: a2, a3 and u1 go, B waits behind its
			// parked head, and a new message of C is C's head.
			f.enqueue(t, msg("c2", "C"))
			rec := newRecorder()
			r, err := f.ob.NewRelay(rec, &outbox.RelayConfig{Retention: -1})
			if err != nil {
				t.Fatal(err)
			}
			drain(t, r)
			got, count, _ := rec.snapshot()
			if len(got) != 4 || count["a2"] != 1 || count["a3"] != 1 || count["u1"] != 1 || count["c2"] != 1 {
				t.Fatalf("published %v, want a2, a3, u1 and c2", count)
			}
			var a2, a3 int
			for i, m := range got {
				switch m.ID {
				case "a2":
					a2 = i
				case "a3":
					a3 = i
				}
			}
			if a3 < a2 {
				t.Fatal("a3 published before a2")
			}
		})
	}
}
