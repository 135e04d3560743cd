// Command upstream is a tiny demo service for idem proxy: POST /charges
// takes ?sleep=DURATION to pretend it is slow and answers 201 with a new
// charge id (?fail=1 answers 500 and charges nothing); GET /stats counts the
// charges, for `idem check --oracle count:/stats#/charges`. It is NOT
// idempotent, which is the point.
//
//	go run ./bench/http/upstream -listen 127.0.0.1:9000
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	flag.Parse()
	var charges atomic.Int64
	http.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
			time.Sleep(d)
		}
		if r.URL.Query().Get("fail") != "" {
			http.Error(w, "charge failed", http.StatusInternalServerError)
			return
		}
		n := charges.Add(1)
		log.Printf("charge #%d executed (Idempotency-Key %q, body %s)", n, r.Header.Get("Idempotency-Key"), body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "{\"charge\":\"ch_%d\",\"request\":%q}\n", n, body)
	})
	http.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"charges\":%d}\n", charges.Load())
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	// The address actually bound (-listen 127.0.0.1:0 picks a free port).
	log.Printf("upstream listening on http://%s", ln.Addr())
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
