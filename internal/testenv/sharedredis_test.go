package testenv

import "testing"

// The keys a test writes under its prefix are gone when it ends, over
// several SCAN steps (2,500 keys; a step looks at 1,000), and a key
// outside the prefix is left alone.
func TestUseRedisDeletesOnlyItsPrefix(t *testing.T) {
	t.Parallel()
	var r SharedRedis
	t.Run("writer", func(t *testing.T) {
		r = UseRedis(t)
		fill := `for i = 1, tonumber(ARGV[2]) do redis.call('SET', ARGV[1] .. i, 'x') end return 0`
		if _, err := RedisCommand(r.Addr, "EVAL", fill, "0", r.Prefix, "2500"); err != nil {
			t.Fatal(err)
		}
	})
	if r.Prefix == "" {
		t.Fatal("UseRedis gave no prefix")
	}
	rc, err := r.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	other := Name("idemt") + ":kept"
	if _, err := rc.do("SET", other, "x", "EX", "60"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = RedisCommand(r.Addr, "DEL", other) })
	count := `return #redis.call('KEYS', ARGV[1])`
	if n, err := rc.do("EVAL", count, "0", r.Prefix+"*"); err != nil || n != "0" {
		t.Fatalf("keys under %s after the test: %s (%v), want 0", r.Prefix, n, err)
	}
	if n, err := rc.do("EXISTS", other); err != nil || n != "1" {
		t.Fatalf("the key outside the prefix: EXISTS %s (%v), want 1", n, err)
	}
}

func TestParseRedisURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want SharedRedis
		ok   bool
	}{
		{"redis://127.0.0.1:6379/0", SharedRedis{Addr: "127.0.0.1:6379"}, true},
		{"redis://127.0.0.1:6379", SharedRedis{Addr: "127.0.0.1:6379"}, true},
		{"redis://:pw@h:1/3", SharedRedis{Addr: "h:1", Password: "pw", DB: 3}, true},
		{"redis://u:pw@h:1/", SharedRedis{Addr: "h:1", Username: "u", Password: "pw"}, true},
		{"rediss://h:1/0", SharedRedis{}, false},
		{"redis://h/0", SharedRedis{}, false},
		{"redis://h:1/x", SharedRedis{}, false},
		{"redis://h:1/0?dial_timeout=1s", SharedRedis{}, false},
	} {
		got, err := parseRedisURL(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseRedisURL(%q) = %+v, %v; want %+v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
