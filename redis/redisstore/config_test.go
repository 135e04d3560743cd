package redisstore_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/redis/redisstore"
)

// TestConfigErrors: every option New rejects, and the arguments its
// methods reject before any I/O, are reported as a *idem.ConfigError of
// package redisstore naming them. New does no I/O.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	for field, cfg := range map[string]*redisstore.Config{
		"Config.MaxResult": {MaxResult: -1},
		"Config.Prefix":    {Prefix: strings.Repeat("p", 1<<16)},
	} {
		_, err := redisstore.New(rdb, cfg)
		configtest.Want(t, err, "redisstore", field)
	}
	_, err := redisstore.New(nil, nil)
	configtest.Want(t, err, "redisstore", "client")
	_, err = redisstore.NewRueidis(nil, nil)
	configtest.Want(t, err, "redisstore", "client")

	s, err := redisstore.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	configtest.WantStoreArgs(t, s, "redisstore")
}
