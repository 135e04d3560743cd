package redistest

import (
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/redis/internal/redisclient"
)

// RueidisOption maps go-redis options (as redis.ParseURL returns them) to
// the rueidis client options that reach the same server the same way.
func RueidisOption(opt *redis.Options) rueidis.ClientOption {
	return redisclient.RueidisOption(opt)
}
