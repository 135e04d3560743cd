package sqlstore_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// goldenRow is one stored record as a golden file shows it: the columns as
// the store writes them, with the values that differ from run to run (the
// owner token, the clock-based fence, the times) replaced by their shape.
type goldenRow struct {
	State       int64   `json:"state"`
	Fingerprint string  `json:"fingerprint"`
	Owner       string  `json:"owner"` // "16 bytes"
	Fence       string  `json:"fence"` // "F": a positive number
	Result      *string `json:"result"`
	CreatedAt   any     `json:"created_at"`
	LeaseUntil  any     `json:"lease_until"`
	ExpiresAt   any     `json:"expires_at"`
	Started     bool    `json:"started"`
}

type goldenFile struct {
	Columns []string             `json:"columns"`
	Records map[string]goldenRow `json:"records"`
}

// TestGoldenRecords pins the records table (schema version 2) on every
// database, both ways: what today's store writes through the Store contract
// must be the committed rows, and the committed rows, written raw into a
// fresh table, must read back through Get as the records they mean. A
// release that fails either would misread the records of the release before
// it during a rolling upgrade (docs/stability.md).
func TestGoldenRecords(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := b.open(t)
			ctx := ctxT(t)
			table := testenv.Name("golden")
			s, err := sqlstore.New(db, &sqlstore.Config{Dialect: b.dialect, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			ph := func(n int) string {
				if b.dialect == sqlstore.Postgres {
					return fmt.Sprintf("$%d", n)
				}
				return "?"
			}

			// Write side.
			scope := testenv.Name("w")
			testenv.WriteGoldenScenarios(t, ctx, s, scope)
			rows, err := db.QueryContext(ctx, "SELECT * FROM "+table+" WHERE 1 = 0")
			if err != nil {
				t.Fatal(err)
			}
			cols, err := rows.Columns()
			rows.Close()
			if err != nil {
				t.Fatal(err)
			}
			got := goldenFile{Columns: cols, Records: map[string]goldenRow{}}
			for _, name := range testenv.GoldenScenarios {
				d := testenv.GoldenKey(scope, name).Digest()
				var (
					r                                     goldenRow
					fp, owner, result                     []byte
					fence, created, leaseUntil, expiresAt int64
				)
				err := db.QueryRowContext(ctx, "SELECT state, fingerprint, owner, fence, result, created_at, lease_until, expires_at, started FROM "+table+" WHERE key_hash = "+ph(1), d[:]).
					Scan(&r.State, &fp, &owner, &fence, &result, &created, &leaseUntil, &expiresAt, &r.Started)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				r.Fingerprint = hex.EncodeToString(fp)
				r.Owner = fmt.Sprintf("%d bytes", len(owner))
				if fence > 0 {
					r.Fence = "F"
				}
				if result != nil {
					h := hex.EncodeToString(result)
					r.Result = &h
				}
				r.CreatedAt, r.LeaseUntil, r.ExpiresAt = testenv.GoldenTime(created, created), testenv.GoldenTime(created, leaseUntil), testenv.GoldenTime(created, expiresAt)
				got.Records[name] = r
			}
			data, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := testenv.Golden(t, "testdata/golden/records-v2-"+strings.ToLower(b.name)+".json", append(data, '\n'))

			// Read side.
			var want goldenFile
			if err := json.Unmarshal(golden, &want); err != nil {
				t.Fatal(err)
			}
			scope = testenv.Name("r")
			for name, r := range want.Records {
				key := testenv.GoldenKey(scope, name)
				d := key.Digest()
				fp, err := hex.DecodeString(r.Fingerprint)
				if err != nil {
					t.Fatal(err)
				}
				var result []byte
				if r.Result != nil {
					if result, err = hex.DecodeString(*r.Result); err != nil {
						t.Fatal(err)
					}
				}
				var times [3]int64
				for i, v := range []any{r.CreatedAt, r.LeaseUntil, r.ExpiresAt} {
					if times[i], err = testenv.ParseGoldenTime(v); err != nil {
						t.Fatal(err)
					}
				}
				q := "INSERT INTO " + table + " (key_hash, state, fingerprint, owner, fence, result, created_at, lease_until, expires_at, started) VALUES ("
				for i := 1; i <= 10; i++ {
					q += ph(i) + map[bool]string{true: ")", false: ", "}[i == 10]
				}
				if _, err := db.ExecContext(ctx, q, d[:], r.State, fp, testenv.GoldenOwner[:], int64(testenv.GoldenFence), result,
					times[0], times[1], times[2], r.Started); err != nil {
					t.Fatalf("%s: insert the committed row: %v", name, err)
				}
				rec, err := s.Get(ctx, key)
				if err != nil {
					t.Fatalf("%s: Get the committed row: %v", name, err)
				}
				testenv.CheckGoldenRecord(t, name, key, rec)
			}
		})
	}
}
