package testenv

import "go.uber.org/goleak"

// RueidisLeakOptions are the goleak options for packages whose tests use a
// rueidis cluster client: after a topology refresh rueidis closes replaced
// connections from a goroutine that sleeps 5s first and cannot be stopped
// (cluster.go, _refresh). It ends by itself; nothing else is ignored.
func RueidisLeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		// A closed cluster or sentinel client may leave the delayed retry
		// of a topology refresh sleeping (singleflight DelayDo, about a
		// second); it ends by itself and does nothing once the client is
		// closed.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	}
}
