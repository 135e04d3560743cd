package testenv

import (
	"flag"
	"runtime"
	"strconv"
)

// RaiseParallel lets a package's parallel tests run n at a time instead of
// GOMAXPROCS at a time, unless -test.parallel was given: for packages whose
// tests mostly wait (for timeouts, leases, server restarts, child
// processes) rather than compute, so that a 2-core machine is not idle
// while they sleep two by two. Call it in TestMain before m.Run.
func RaiseParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(max(n, runtime.GOMAXPROCS(0))))
	}
}
