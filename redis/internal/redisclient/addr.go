package redisclient

import "github.com/redis/go-redis/v9"

// Addr returns the address of the one server c talks to (a node given by
// ForEachMaster, or a single-node client), or "" when c is not bound to one
// server (a cluster, a ring) or does not tell. It is for messages only.
func Addr(c Client) string {
	switch c := c.(type) {
	case goRedis:
		if n, ok := c.rdb.(*redis.Client); ok {
			return n.Options().Addr
		}
	case ruClient:
		if nodes := c.c.Nodes(); len(nodes) == 1 {
			for addr := range nodes {
				return addr
			}
		}
	}
	return ""
}
