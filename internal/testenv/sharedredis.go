package testenv

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// SharedRedis is the shared test Redis (IDEM_TEST_REDIS) as one test uses
// it: what a client needs to reach it, and the test's key prefix.
type SharedRedis struct {
	Addr     string // host:port
	Username string
	Password string
	DB       int
	// Prefix is unique to the test and ends in ":". The test keeps its keys
	// under it: the shared server is never flushed, killed or restarted.
	Prefix string
}

// UseRedis returns the shared test Redis with a fresh key prefix, and
// deletes the keys under the prefix when the test ends. It skips (or fails
// under IDEM_REQUIRE_SERVICES=1) when the server does not answer a PING.
// IDEM_TEST_REDIS must read redis://[[user]:password@]host:port[/db]:
// testenv speaks plain RESP to it, without TLS.
func UseRedis(tb testing.TB) SharedRedis {
	tb.Helper()
	r, err := parseRedisURL(Redis.Need(tb))
	if err != nil {
		tb.Fatalf("IDEM_TEST_REDIS: %v", err)
	}
	rc, err := r.dial()
	if err == nil {
		_, err = rc.do("PING")
		rc.Close()
	}
	if err != nil {
		Unavailable(tb, "Redis (IDEM_TEST_REDIS)", err)
	}
	r.Prefix = Name("idemt") + ":"
	tb.Cleanup(func() {
		if err := r.deleteKeys(); err != nil {
			tb.Errorf("deleting the keys under %s on the shared Redis: %v", r.Prefix, err)
		}
	})
	return r
}

func parseRedisURL(s string) (SharedRedis, error) {
	u, err := url.Parse(s)
	if err != nil {
		return SharedRedis{}, err
	}
	if u.Scheme != "redis" || u.Port() == "" || u.RawQuery != "" {
		return SharedRedis{}, fmt.Errorf("%s is not of the form redis://[[user]:password@]host:port[/db]", u.Redacted())
	}
	r := SharedRedis{Addr: u.Host, Username: u.User.Username()}
	r.Password, _ = u.User.Password()
	if db := strings.Trim(u.Path, "/"); db != "" {
		if r.DB, err = strconv.Atoi(db); err != nil {
			return SharedRedis{}, fmt.Errorf("%s: database %q is not a number", u.Redacted(), db)
		}
	}
	return r, nil
}

// dial connects to the server, authenticated and on the database.
func (r SharedRedis) dial() (*redisConn, error) {
	rc, err := dialRedis(r.Addr)
	if err != nil {
		return nil, err
	}
	var cmds [][]string
	switch {
	case r.Username != "":
		cmds = append(cmds, []string{"AUTH", r.Username, r.Password})
	case r.Password != "":
		cmds = append(cmds, []string{"AUTH", r.Password})
	}
	if r.DB != 0 {
		cmds = append(cmds, []string{"SELECT", strconv.Itoa(r.DB)})
	}
	for _, c := range cmds {
		if _, err := rc.do(c...); err != nil {
			rc.Close()
			return nil, fmt.Errorf("%s: %w", c[0], err)
		}
	}
	return rc, nil
}

// deleteStep deletes the keys that one SCAN step (cursor ARGV[1]) finds
// under the pattern ARGV[2] and returns the next cursor: a step per call,
// so that the shared server is never blocked for a whole scan.
const deleteStep = `local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', 1000)
for _, k in ipairs(r[2]) do redis.call('DEL', k) end
return r[1]`

// deleteKeys deletes every key under r.Prefix.
func (r SharedRedis) deleteKeys() error {
	rc, err := r.dial()
	if err != nil {
		return err
	}
	defer rc.Close()
	cursor := "0"
	for {
		next, err := rc.do("EVAL", deleteStep, "0", cursor, r.Prefix+"*")
		if err != nil {
			return err
		}
		if next == "0" {
			return nil
		}
		cursor = next
	}
}
