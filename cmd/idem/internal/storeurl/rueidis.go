package storeurl

import (
	"net"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// rueidisOption returns the rueidis options that reach the server opt
// describes, with the same settings. It is a copy of
// redis/internal/redisclient.RueidisOption, which this module cannot import
// (it is internal to the redis module): keep the two in step.
func rueidisOption(opt *redis.Options) rueidis.ClientOption {
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
