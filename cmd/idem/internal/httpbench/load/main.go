// Command load sends POST requests with Idempotency-Keys to a URL and
// prints the throughput: the load script behind the HTTP figures in BENCHMARKS.md.
//
//	go run ./cmd/idem/internal/httpbench/load -url http://127.0.0.1:8080/charges -c 32 -n 20000 -keys unique
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	httpbench "github.com/idemkit/idem/cmd/idem/internal/httpbench"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/charges", "target URL")
	c := flag.Int("c", 32, "concurrent connections")
	n := flag.Int("n", 20000, "requests")
	keys := flag.String("keys", "unique", "Idempotency-Key per request: unique, same or none")
	prefix := flag.String("prefix", "", "key prefix (default: unique to this run); with -keys same, runs that share it replay one key")
	flag.Parse()
	mode := httpbench.KeyMode(*keys)
	if mode != httpbench.UniqueKeys && mode != httpbench.SameKey && mode != httpbench.NoKey {
		fmt.Fprintln(os.Stderr, "load: -keys must be unique, same or none")
		os.Exit(2)
	}
	if *prefix == "" {
		*prefix = "load-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	}
	d, bad, err := httpbench.Load(context.Background(), httpbench.NewClient(*c), *url, *c, *n, mode, *prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	fmt.Printf("%d requests, %d connections, keys %s: %.0f req/s (%d non-2xx)\n", *n, *c, mode, float64(*n)/d.Seconds(), bad)
}
