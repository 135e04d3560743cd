// Package peers measures idem's HTTP middleware next to other Go
// idempotency middlewares, each required here as a module (none of their
// code is in this repository), on the same in-process request and the
// same handler: read the body, answer 201 with 48 bytes of JSON.
//
// BenchmarkPeers has one sub-benchmark per system and case; callgrind.sh
// runs each under valgrind --tool=callgrind and prints instructions per
// request divided by the bare handler's, and proxycpu.sh compares the CPU
// of `idem proxy --store memory:` with a plain httputil.ReverseProxy
// (./rproxy) over real loopback HTTP. BENCHMARKS.md ("Hot path") has the
// figures and the commands.
//
// Of the peers named in issue 22 only gofiber/fiber/v3's idempotency
// middleware could be fetched from the module proxy when this module was
// written; fco-gt/gopotency, repenguin22/idemlease and
// faustbrian/go-idempotency answered 403 (not available) and are not
// measured.
package peers
