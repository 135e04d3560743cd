package redisclient_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/redis/internal/redisclient"
)

// TestRueidisOption: what go-redis's options say about reaching the server
// carries over to rueidis; go-redis's "none" (negative) timeouts leave
// rueidis's defaults, never a deadline in the past.
func TestRueidisOption(t *testing.T) {
	tc := &tls.Config{ServerName: "redis.internal"}
	o := redisclient.RueidisOption(&redis.Options{
		Addr: "10.0.0.5:6380", DB: 3, Username: "app", Password: "pw", ClientName: "idem",
		TLSConfig: tc, DialTimeout: 2 * time.Second, ReadTimeout: 4 * time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, Protocol: 2,
	})
	if len(o.InitAddress) != 1 || o.InitAddress[0] != "10.0.0.5:6380" || o.SelectDB != 3 || o.Username != "app" ||
		o.Password != "pw" || o.ClientName != "idem" || o.TLSConfig != tc {
		t.Errorf("address, database, credentials, name or TLS lost: %+v", o)
	}
	if o.Dialer.Timeout != 2*time.Second || o.ConnWriteTimeout != 4*time.Second {
		t.Errorf("dial timeout %v, conn write timeout %v; want 2s, 4s (the longer of read and write)", o.Dialer.Timeout, o.ConnWriteTimeout)
	}
	if !o.DisableRetry || !o.AlwaysRESP2 || !o.DisableCache {
		t.Errorf("DisableRetry %v, AlwaysRESP2 %v, DisableCache %v; want all true", o.DisableRetry, o.AlwaysRESP2, o.DisableCache)
	}
	d := redisclient.RueidisOption(&redis.Options{Addr: "h:1", DialTimeout: -1, ReadTimeout: -1, WriteTimeout: -2})
	if d.Dialer.Timeout != 0 || d.ConnWriteTimeout != 0 || d.DisableRetry || d.AlwaysRESP2 {
		t.Errorf("negative timeouts or defaults mapped to %+v; want rueidis's defaults", d)
	}
}
