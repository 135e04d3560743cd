package optlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/configtest"
)

var errBoom = errors.New("boom")

func TestDo(t *testing.T) {
	t.Parallel()
	fast := &Config{MaxAttempts: 4, BaseDelay: time.Microsecond, MaxDelay: 10 * time.Microsecond}
	conflict := fmt.Errorf("write lost: %w", ErrConflict)
	cases := []struct {
		name      string
		results   []error // what fn returns on attempt 1, 2, …
		wantCalls int
		wantErr   error // nil, errBoom or ErrConflict
	}{
		{"first try", []error{nil}, 1, nil},
		{"after two conflicts", []error{conflict, ErrConflict, nil}, 3, nil},
		{"bounded", []error{conflict, conflict, conflict, conflict, nil}, 4, ErrConflict},
		{"other error stops at once", []error{errBoom, nil}, 1, errBoom},
		{"other error after a conflict", []error{conflict, errBoom}, 2, errBoom},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := Do(context.Background(), fast, func(ctx context.Context, attempt int) error {
				calls++
				if attempt != calls {
					t.Fatalf("attempt = %d on call %d", attempt, calls)
				}
				return c.results[calls-1]
			})
			if calls != c.wantCalls {
				t.Fatalf("fn called %d times, want %d", calls, c.wantCalls)
			}
			switch c.wantErr {
			case nil:
				if err != nil {
					t.Fatalf("Do = %v, want nil", err)
				}
			case errBoom:
				if err != errBoom {
					t.Fatalf("Do = %v, want fn's error unchanged", err)
				}
			default:
				if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "4 attempt(s)") {
					t.Fatalf("Do = %v, want ErrConflict after 4 attempts", err)
				}
			}
		})
	}
}

func TestDoHonoursContext(t *testing.T) {
	t.Parallel()
	t.Run("done before the first attempt", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := Do(ctx, nil, func(context.Context, int) error {
			t.Fatal("fn called with a done context")
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v", err)
		}
	})
	t.Run("cancelled during a backoff", func(t *testing.T) {
		t.Parallel()
		// An hour of backoff: if Do did not watch ctx, the test would hang.
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := Do(ctx, &Config{MaxAttempts: 3, BaseDelay: time.Hour, MaxDelay: time.Hour},
			func(context.Context, int) error {
				calls++
				go func() { time.Sleep(time.Millisecond); cancel() }()
				return ErrConflict
			})
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrConflict) {
			t.Fatalf("Do = %v, want context.Canceled (and not ErrConflict)", err)
		}
		if calls > 2 {
			t.Fatalf("fn called %d times", calls)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := Do(ctx, &Config{MaxAttempts: 1 << 30, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
			func(context.Context, int) error { return ErrConflict })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do = %v", err)
		}
	})
}

func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	c := (&Config{BaseDelay: 3 * time.Millisecond, MaxDelay: 100 * time.Millisecond}).withDefaults()
	for attempt := 1; attempt <= 200; attempt++ {
		ceiling := 100 * time.Millisecond
		if attempt <= 6 {
			ceiling = min(ceiling, 3*time.Millisecond<<(attempt-1))
		}
		var max time.Duration
		for range 200 {
			d := c.backoff(attempt)
			if d < 0 || d > ceiling {
				t.Fatalf("backoff(%d) = %v, want within [0, %v]", attempt, d, ceiling)
			}
			max = maxDur(max, d)
		}
		if max < ceiling/4 { // 200 uniform draws all below a quarter: p = 4^-200
			t.Fatalf("backoff(%d) never exceeded %v of a %v ceiling: not jittered over the range", attempt, max, ceiling)
		}
	}
	zero := Config{MaxAttempts: 3} // no delays at all (withDefaults not applied)
	if d := zero.backoff(3); d != 0 {
		t.Fatalf("zero delays: backoff = %v", d)
	}
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cfg         Config
		field, want string
	}{
		{Config{MaxAttempts: -1}, "Config.MaxAttempts", "must be at least 1, got -1"},
		{Config{BaseDelay: -time.Second}, "Config.BaseDelay", "must not be negative"},
		{Config{BaseDelay: time.Second, MaxDelay: time.Millisecond}, "Config.MaxDelay", "1ms is below BaseDelay (1s)"},
	}
	for _, c := range cases {
		err := Do(context.Background(), &c.cfg, func(context.Context, int) error {
			t.Fatal("fn called with an invalid config")
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Do(%+v) = %v, want %q", c.cfg, err, c.want)
		}
		configtest.Want(t, err, "optlock", c.field)
	}
}

func TestNewTable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		dialect Dialect
		name    string
		cfg     *TableConfig
		field   string
		want    string
	}{
		{0, "accounts", nil, "dialect", "required"},
		{Dialect(42), "accounts", nil, "dialect", "unknown dialect Dialect(42)"},
		{Postgres, "accounts where 1=1", nil, "table", "not a plain identifier"},
		{Postgres, "a.b.c", nil, "table", "at most one dot"},
		{MySQL, "accounts", &TableConfig{IDColumn: "id;"}, "TableConfig.IDColumn", "not a plain identifier"},
		{MySQL, "accounts", &TableConfig{VersionColumn: "v v"}, "TableConfig.VersionColumn", "not a plain identifier"},
		{SQLite, "accounts", &TableConfig{VersionColumn: "id"}, "TableConfig.VersionColumn", "must differ"},
		{MySQL, "accounts", &TableConfig{VersionColumn: "ID"}, "TableConfig.VersionColumn", "must differ"},
	}
	for _, c := range cases {
		_, err := NewTable(c.dialect, c.name, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewTable(%q, %q, %+v) = %v, want %q", c.dialect, c.name, c.cfg, err, c.want)
		}
		configtest.Want(t, err, "optlock", c.field)
	}
	if _, err := NewTable(Postgres, "bank.accounts", &TableConfig{IDColumn: "account_id", VersionColumn: "lock_version"}); err != nil {
		t.Fatal(err)
	}
}

func TestUpdateSQL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		dialect Dialect
		set     map[string]any
		want    string
	}{
		{Postgres, map[string]any{"owner": "x", "balance": 1},
			"UPDATE accounts SET version = version + 1, balance = $1, owner = $2 WHERE id = $3 AND version = $4"},
		{MySQL, nil, "UPDATE accounts SET version = version + 1 WHERE id = ? AND version = ?"},
		{SQLite, map[string]any{"balance": 1}, "UPDATE accounts SET version = version + 1, balance = ? WHERE id = ? AND version = ?"},
	}
	for _, c := range cases {
		tbl, err := NewTable(c.dialect, "accounts", nil)
		if err != nil {
			t.Fatal(err)
		}
		q, args, err := tbl.updateSQL(int64(1), 0, c.set)
		if err != nil {
			t.Fatal(err)
		}
		if q != c.want || len(args) != len(c.set)+2 || args[len(args)-1] != int64(0) {
			t.Errorf("%s: got %s %v\nwant %s", c.dialect, q, args, c.want)
		}
	}
}
