package redisstore_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// TestGoldenRecords pins the record encoding (a hash, encoding version 1)
// both ways: what today's store writes through the Store contract must be
// the committed fields, and the committed fields, written raw, must read
// back through Get as the records they mean. A release that fails either
// would misread the records of the release before it during a rolling
// upgrade (docs/stability.md).
func TestGoldenRecords(t *testing.T) {
	t.Parallel()
	s, c, _ := newStore(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Write side: every field, the values that differ from run to run (the
	// owner token, the clock-based fence, the times) replaced by their
	// shape, and the key's TTL to the hour.
	scope := testenv.Name("w")
	testenv.WriteGoldenScenarios(t, ctx, s, scope)
	got := map[string]map[string]any{}
	for _, name := range testenv.GoldenScenarios {
		key := testenv.GoldenKey(scope, name)
		h, err := c.HGetAll(ctx, s.Key(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		pttl, err := c.PTTL(ctx, s.Key(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		created, _ := strconv.ParseInt(h["c"], 10, 64)
		row := map[string]any{"(ttl)": pttl.Round(time.Hour).String()}
		for f, v := range h {
			switch f {
			case "c", "lu", "x":
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: field %s: %v", name, f, err)
				}
				row[f] = testenv.GoldenTime(created, us)
			case "f":
				row[f] = "F"
			case "tok", "rn": // the owner token, a release's nonce
				row[f] = fmt.Sprintf("%d bytes", len(v))
			case "fp", "res":
				row[f] = "hex:" + hex.EncodeToString([]byte(v))
			default:
				row[f] = v
			}
		}
		got[name] = row
	}
	data, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := testenv.Golden(t, "testdata/golden/records-v1.json", append(data, '\n'))

	// Read side.
	var want map[string]map[string]any
	if err := json.Unmarshal(golden, &want); err != nil {
		t.Fatal(err)
	}
	scope = testenv.Name("r")
	for name, row := range want {
		key := testenv.GoldenKey(scope, name)
		var fields []any
		for f, v := range row {
			var val string
			switch f {
			case "(ttl)":
				continue
			case "c", "lu", "x":
				us, err := testenv.ParseGoldenTime(v)
				if err != nil {
					t.Fatal(err)
				}
				val = strconv.FormatInt(us, 10)
			case "f":
				val = strconv.FormatUint(testenv.GoldenFence, 10)
			case "tok", "rn":
				val = string(testenv.GoldenOwner[:])
			case "fp", "res":
				b, err := hex.DecodeString(v.(string)[len("hex:"):])
				if err != nil {
					t.Fatal(err)
				}
				val = string(b)
			default:
				val = v.(string)
			}
			fields = append(fields, f, val)
		}
		if err := c.HSet(ctx, s.Key(key), fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Expire(ctx, s.Key(key), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("%s: Get the committed record: %v", name, err)
		}
		testenv.CheckGoldenRecord(t, name, key, rec)
	}
}
