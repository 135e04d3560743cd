// Command upstream is a tiny demo service for idem proxy: POST /charges
// takes ?sleep=DURATION to pretend it is slow and answers 201 with a new
// charge id (?fail=1 answers 500 and charges nothing); GET /stats counts the
// charges, for `idem check --oracle count:/stats#/charges`. It is NOT
// idempotent, which is the point.
//
// It also keeps its own record of each charge by caller (a digest of the
// Authorization header) and the Idempotency-Key it received (compared
// parsed, so k and "k" are one key, as for idem), with the
// Idempotency-Fingerprint the proxy sent, and answers idem proxy's
// resolver (--resolve-url http://ADDR/idempotency): GET /idempotency with
// the caller's Authorization and the key answers that caller's charge's
// response with its fingerprint, or 404 never-happened when that caller
// has none. Never by the key alone: another caller may use the same key. With
// -records FILE the records survive a restart. The request header
// X-Upstream-Die: after charges, records and exits before answering (the
// answer is lost: the proxy holds the key); X-Upstream-Die: before exits
// before charging (the charge never happened). A header, not the query, so
// that a retry without it is the same request for the fingerprint.
//
//	go run ./cmd/idem/internal/httpbench/upstream -listen 127.0.0.1:9000 -records charges.jsonl
//	idem proxy --upstream http://127.0.0.1:9000 --resolve-url http://127.0.0.1:9000/idempotency
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/idemkit/idem/httpidem"
)

// record is a charge's answer, by caller and key.
type record struct {
	Caller      string `json:"caller"`
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Body        string `json:"body"`
}

// recordID is what a record is looked up by: the caller and the key.
type recordID struct{ caller, key string }

// callerOf identifies r's caller: a digest of its Authorization header
// (a real service uses the account it authenticated), so that the records
// file holds no credential.
func callerOf(r *http.Request) string {
	sum := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	return hex.EncodeToString(sum[:8])
}

// keyOf is r's key, parsed as idem parses it (k and "k" are one key).
func keyOf(r *http.Request) string {
	v := r.Header.Get("Idempotency-Key")
	if id, err := httpidem.ParseKey(v); err == nil {
		return id
	}
	return v
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
		byKey   = map[recordID]record{}
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
				byKey[recordID{r.Caller, r.Key}] = r
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
			rec := record{Caller: callerOf(r), Key: keyOf(r), Fingerprint: r.Header.Get(httpidem.FingerprintHeader), Body: answer}
			mu.Lock()
			byKey[recordID{rec.Caller, rec.Key}] = rec
			if file != nil {
				line, _ := json.Marshal(rec)
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
		rec, ok := byKey[recordID{callerOf(r), keyOf(r)}] // this caller's record, never another's
		mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, "{\"type\":%q,\"title\":\"No operation with this key\",\"status\":404}\n", neverHappened)
			return
		}
		if rec.Fingerprint != "" {
			w.Header().Set(httpidem.FingerprintHeader, rec.Fingerprint) // the proxy refuses it for another request
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, rec.Body)
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
