package testenv

import "go.uber.org/goleak"

// RueidisLeakOptions are the goleak options for packages whose tests use a
// rueidis cluster client: after a topology refresh rueidis closes replaced
// connections from a goroutine that sleeps 5s first and cannot be stopped
// (cluster.go, _refresh). It ends by itself; nothing else is ignored.
func RueidisLeakOptions() []goleak.Option {
	return []goleak.Option{goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2")}
}
