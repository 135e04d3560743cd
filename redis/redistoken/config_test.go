package redistoken_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/redis/redistoken"
)

// TestConfigErrors: every option New rejects, and Insert's ttl, are
// reported as a *idem.ConfigError of package redistoken naming them. New
// does no I/O.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	for field, cfg := range map[string]*redistoken.Config{
		"Config.Retain": {Retain: time.Microsecond},
		"Config.Prefix": {Prefix: "{tag}:"},
	} {
		_, err := redistoken.New(rdb, cfg)
		configtest.Want(t, err, "redistoken", field)
	}
	_, err := redistoken.New(nil, nil)
	configtest.Want(t, err, "redistoken", "client")
	_, err = redistoken.NewRueidis(nil, nil)
	configtest.Want(t, err, "redistoken", "client")
	s, err := redistoken.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	configtest.Want(t, s.Insert(context.Background(), onetime.Digest{}, onetime.Digest{}, 0), "redistoken", "ttl")
}
