package redisclient

import (
	"net"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// RueidisOption returns the rueidis options that reach the server opt
// describes, as go-redis would: the address, database, username and
// password, TLS, client name and RESP version; DialTimeout bounds the dial;
// the longer of ReadTimeout and WriteTimeout, when positive, becomes
// ConnWriteTimeout (rueidis closes a connection whose pipeline stops
// answering for that long); MaxRetries < 0 disables rueidis's retries of
// read-only commands (scripts are never retried). Client-side caching is
// off: the packages never read through it, and it would need CLIENT
// TRACKING, which restricted users may lack. opt.Dialer, hooks and pool
// sizes have no rueidis counterpart and are not carried over.
func RueidisOption(opt *redis.Options) rueidis.ClientOption {
	o := rueidis.ClientOption{
		InitAddress:  []string{opt.Addr},
		Username:     opt.Username,
		Password:     opt.Password,
		ClientName:   opt.ClientName,
		SelectDB:     opt.DB,
		TLSConfig:    opt.TLSConfig,
		DisableRetry: opt.MaxRetries < 0,
		DisableCache: true,
		AlwaysRESP2:  opt.Protocol == 2,
	}
	if opt.DialTimeout > 0 { // go-redis reads a negative one as "none"
		o.Dialer = net.Dialer{Timeout: opt.DialTimeout}
	}
	if t := max(opt.ReadTimeout, opt.WriteTimeout); t > 0 {
		o.ConnWriteTimeout = t
	}
	return o
}
