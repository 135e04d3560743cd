// Command upstream is a tiny demo service for idem proxy: POST /charges
// takes ?sleep=DURATION to pretend it is slow and answers 201 with a new
// charge id (?fail=1 answers 500 and charges nothing); GET /stats counts the
// charges, for `idem check --oracle count:/stats#/charges`. It is NOT
// idempotent, which is the point.
//
// It also keeps its own record of each charge by the Idempotency-Key it
// received, and answers idem proxy's resolver (--resolve-url
// http://ADDR/idempotency): GET /idempotency with the key answers the
// charge's response, or 404 never-happened when it has none. With
// -records FILE the records survive a restart. The request header
// X-Upstream-Die: after charges, records and exits before answering (the
// answer is lost: the proxy holds the key); X-Upstream-Die: before exits
// before charging (the charge never happened). A header, not the query, so
// that a retry without it is the same request for the fingerprint.
//
//	go run ./bench/http/upstream -listen 127.0.0.1:9000 -records charges.jsonl
//	idem proxy --upstream http://127.0.0.1:9000 --resolve-url http://127.0.0.1:9000/idempotency
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// record is a charge's answer, by key.
type record struct {
	Key  string `json:"key"`
	Body string `json:"body"`
}

// neverHappened is httpidem.ProblemNeverHappened.
const neverHappened = "https://github.com/idemkit/idem/blob/main/httpidem/problems.md#never-happened"

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	records := flag.String("records", "", "keep the records of charges by key in this file (JSON lines), across restarts")
	flag.Parse()
	var (
		charges atomic.Int64
		mu      sync.Mutex
		byKey   = map[string]string{}
		file    *os.File
	)
	if *records != "" {
		f, err := os.OpenFile(*records, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			log.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r record
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				byKey[r.Key] = r.Body
				charges.Add(1)
			}
		}
		file = f
	}
	http.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
			time.Sleep(d)
		}
		if r.URL.Query().Get("fail") != "" {
			http.Error(w, "charge failed", http.StatusInternalServerError)
			return
		}
		die := r.Header.Get("X-Upstream-Die")
		if die == "before" {
			log.Printf("dying before the charge (Idempotency-Key %q)", r.Header.Get("Idempotency-Key"))
			os.Exit(3)
		}
		key := r.Header.Get("Idempotency-Key")
		n := charges.Add(1)
		answer := fmt.Sprintf("{\"charge\":\"ch_%d\",\"request\":%q}\n", n, body)
		if key != "" {
			mu.Lock()
			byKey[key] = answer
			if file != nil {
				line, _ := json.Marshal(record{Key: key, Body: answer})
				_, _ = file.Write(append(line, '\n'))
				_ = file.Sync()
			}
			mu.Unlock()
		}
		log.Printf("charge #%d executed (Idempotency-Key %q, body %s)", n, key, body)
		if die == "after" {
			log.Printf("dying before answering charge #%d", n)
			os.Exit(3)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, answer)
	})
	http.HandleFunc("GET /idempotency", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		answer, ok := byKey[r.Header.Get("Idempotency-Key")]
		mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "{\"type\":%q,\"title\":\"No operation with this key\",\"status\":404}\n", neverHappened)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, answer)
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
