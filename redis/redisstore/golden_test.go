package redisstore_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
)

// TestGoldenRecords pins the record encoding (a hash, encoding version 1)
// both ways: what today's store writes through the Store contract must be
// the committed fields, and the committed fields, written raw, must read
// back through Get as the records they mean. A release that fails either
// would misread the records of the release before it during a rolling
// upgrade (docs/stability.md).
func TestGoldenRecords(t *testing.T) {
	t.Parallel()
	s, c, ctx := goldenRig(t)

	// Write side.
	scope := testenv.Name("w")
	testenv.WriteGoldenScenarios(t, ctx, s, scope)
	golden := testenv.Golden(t, "testdata/golden/records-v1.json", dumpGolden(t, ctx, s, c, scope, testenv.GoldenScenarios))

	// Read side.
	scope = testenv.Name("r")
	for name := range loadGolden(t, ctx, s, c, scope, golden) {
		key := testenv.GoldenKey(scope, name)
		rec, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("%s: Get the committed record: %v", name, err)
		}
		testenv.CheckGoldenRecord(t, name, key, rec)
	}
}

// TestGoldenHeld pins held records both ways. held-v1.json holds the
// fields that v0.1.0 wrote for a key held by Do and one held by httpidem
// (a completed record with an outcome-unknown result, no held mark):
// written raw, they read as held, replay, list and resolve. held-marked-v1.json
// pins what this release writes (the held mark h), and reads the same.
func TestGoldenHeld(t *testing.T) {
	t.Parallel()
	s, c, ctx := goldenRig(t)

	scope := testenv.Name("w")
	testenv.WriteGoldenHeld(t, ctx, s, scope)
	marked := testenv.Golden(t, "testdata/golden/held-marked-v1.json", dumpGolden(t, ctx, s, c, scope, testenv.GoldenHeldScenarios))
	legacy, err := os.ReadFile("testdata/golden/held-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	for file, golden := range map[string][]byte{"held-v1.json": legacy, "held-marked-v1.json": marked} {
		t.Run(file, func(t *testing.T) {
			scope := testenv.Name("r")
			loadGolden(t, ctx, s, c, scope, golden)
			testenv.CheckGoldenHeld(t, ctx, s, scope)
		})
	}
	// A legacy record is read as held by its result: a resolution with
	// such a result would leave the key held, and is refused.
	err = idem.Resolve(ctx, s, idem.Resolution{Digest: testenv.GoldenKey(scope, "held_http").Digest(), Fence: 1,
		Result: testenv.GoldenHeldResult("held_http")})
	configtest.Want(t, err, "redisstore", "Resolution.Result")
}

// goldenRig returns a store, its client and a context for a golden test.
func goldenRig(t *testing.T) (*redisstore.Store, *redis.Client, context.Context) {
	s, c, _ := newStore(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return s, c, ctx
}

// dumpGolden returns the records of names under scope as a golden file
// shows them: every field, the values that differ from run to run (the
// owner token, the clock-based fence, the times) replaced by their shape,
// and the key's TTL to the hour.
func dumpGolden(t *testing.T, ctx context.Context, s *redisstore.Store, c *redis.Client, scope string, names []string) []byte {
	t.Helper()
	got := map[string]map[string]any{}
	for _, name := range names {
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
	return append(data, '\n')
}

// loadGolden writes the records of golden raw under scope, with the fixed
// values of testenv (GoldenFence, GoldenOwner, times in 2100), and returns
// them by name.
func loadGolden(t *testing.T, ctx context.Context, s *redisstore.Store, c *redis.Client, scope string, golden []byte) map[string]map[string]any {
	t.Helper()
	var want map[string]map[string]any
	if err := json.Unmarshal(golden, &want); err != nil {
		t.Fatal(err)
	}
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
	}
	return want
}
