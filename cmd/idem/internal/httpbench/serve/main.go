// Command serve runs the benchmark handler twice on loopback, bare and
// behind the httpidem middleware on a memory store, for load generators
// such as wrk (cmd/idem/internal/httpbench/wrk):
//
//	go run ./cmd/idem/internal/httpbench/serve -bare 127.0.0.1:8081 -idem 127.0.0.1:8082
//	wrk -t2 -c64 -d20s -s cmd/idem/internal/httpbench/wrk/first.lua http://127.0.0.1:8081/charges
//	wrk -t2 -c64 -d20s -s cmd/idem/internal/httpbench/wrk/first.lua http://127.0.0.1:8082/charges
package main

import (
	"flag"
	"log"
	"log/slog"
	"net/http"

	httpbench "github.com/idemkit/idem/cmd/idem/internal/httpbench"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
)

func main() {
	bare := flag.String("bare", "127.0.0.1:8081", "address of the bare handler")
	protected := flag.String("idem", "127.0.0.1:8082", "address of the handler behind httpidem")
	flag.Parse()
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	errc := make(chan error, 2)
	go func() { errc <- http.ListenAndServe(*bare, httpbench.Handler()) }()
	go func() { errc <- http.ListenAndServe(*protected, mw.Handler(httpbench.Handler())) }()
	log.Printf("bare http://%s, idem http://%s", *bare, *protected)
	log.Fatal(<-errc)
}
