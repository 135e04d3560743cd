// Package client compares retrying HTTP clients on a bad network: the
// same chaos run (faults on both links around a real idem proxy) with
// idemclient and with hashicorp/go-retryablehttp, counting the duplicate
// effects at the service.
//
// It is its own module, so that the core module never requires
// go-retryablehttp. Run it from this directory:
//
//	go test -count=1 -run TestSideBySide -v .
//
// docs/client.md and BENCHMARKS.md ("Client") have its figures.
package client
