package httpidem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// ProblemNeverHappened is the problem type a service answers a resolve
// request with (404) when it has no trace of the operation of the key:
// the held key is then released, and the next retry runs the request.
const ProblemNeverHappened = problemBase + "never-happened"

// ResolveAnswer is what a service says became of a held key's request.
type ResolveAnswer struct {
	// NeverHappened: the service has no trace of the operation; the key
	// is released so that the next retry runs it.
	NeverHappened bool
	// Otherwise the response the service gives for the key: it becomes
	// the key's result, replayed to every retry.
	Status int
	Header http.Header
	Body   []byte
}

// ResolveFunc asks the service what became of r, a request whose key is
// held (its outcome is unknown). key is the key in its canonical
// spelling (FormatKey). An error leaves the key held; the middleware asks
// again later, with backoff. See Config.ResolveFunc.
type ResolveFunc func(ctx context.Context, key string, r *http.Request) (ResolveAnswer, error)

// ResolveURL returns a ResolveFunc that asks target with
// "GET target" carrying the Idempotency-Key header (canonical spelling)
// and the caller's scope headers (scopeHeaders; nil: Authorization), with
// client (nil: a client with a 10-second timeout). The service answers:
//
//   - 404 with a problem+json body whose type is ProblemNeverHappened:
//     the operation never happened;
//   - any other status from 200 to 499: the response the service gives
//     for the key (stored and replayed);
//   - anything else, or no answer: unknown still (an error).
func ResolveURL(target string, client *http.Client, scopeHeaders []string) (ResolveFunc, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &idem.ConfigError{Package: "httpidem", Field: "target", Reason: "want an http:// or https:// URL with a host"}
	}
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if len(scopeHeaders) == 0 {
		scopeHeaders = []string{"Authorization"}
	}
	return func(ctx context.Context, key string, r *http.Request) (ResolveAnswer, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return ResolveAnswer{}, err
		}
		req.Header.Set(DefaultHeader, key)
		for _, h := range scopeHeaders {
			for _, v := range r.Header.Values(h) {
				req.Header.Add(h, v)
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			return ResolveAnswer{}, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		if err != nil {
			return ResolveAnswer{}, err
		}
		if resp.StatusCode == http.StatusNotFound {
			if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/problem+json" {
				var p Problem
				if json.Unmarshal(body, &p) == nil && p.Type == ProblemNeverHappened {
					return ResolveAnswer{NeverHappened: true}, nil
				}
			}
		}
		if resp.StatusCode < 200 || resp.StatusCode > 499 {
			return ResolveAnswer{}, fmt.Errorf("httpidem: resolve URL answered %d", resp.StatusCode)
		}
		h := resp.Header.Clone()
		delete(h, "Date")
		return ResolveAnswer{Status: resp.StatusCode, Header: h, Body: body}, nil
	}, nil
}

// ResolverStats counts the middleware's resolve requests (Config.ResolveFunc).
type ResolverStats struct {
	Pending  int64  // held keys waiting for an answer
	Asked    uint64 // resolve requests sent
	Failed   uint64 // of them, without a usable answer (the key stays held)
	Resolved uint64 // held keys resolved with the service's answer
	Released uint64 // held keys released (never happened)
	Dropped  uint64 // held keys not followed up (MaxPending reached, or Close)
}

// Resolve backoff: the first question goes at once, then after 1s, 2s, 4s …
// up to a minute between questions.
const (
	resolveFirstBackoff = time.Second
	resolveMaxBackoff   = time.Minute
	resolveMaxPending   = 10000
	resolveTimeout      = 10 * time.Second
)

type resolver struct {
	fn      ResolveFunc
	store   idem.Store
	retain  time.Duration
	counted func(release bool) // Config.ResolvedFunc, or nil

	mu      sync.Mutex
	stopped bool
	keys    map[idem.Digest]bool // followed up now, by this process
	stop    chan struct{}
	wg      sync.WaitGroup

	pending                                    atomic.Int64
	asked, failed, resolved, released, dropped atomic.Uint64
}

// follow asks the service, in the background until it answers or the
// record stops being held, about the held record of owner, r's. A zero
// fence (a replay of a held answer: a process that held the key may have
// died before it heard back) is read from the store first. A key is
// followed up once at a time per process.
func (z *resolver) follow(r *http.Request, key idem.Key, owner idem.Owner) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.keys[key.Digest()] {
		return
	}
	if z.stopped || z.pending.Load() >= resolveMaxPending {
		z.dropped.Add(1)
		return
	}
	if z.keys == nil {
		z.keys = make(map[idem.Digest]bool)
	}
	z.keys[key.Digest()] = true
	z.pending.Add(1)
	z.wg.Add(1)
	req := r.Clone(context.Background())
	req.Body = nil
	go z.run(req, FormatKey(key.ID()), owner)
}

func (z *resolver) run(r *http.Request, key string, owner idem.Owner) {
	defer z.wg.Done()
	defer z.pending.Add(-1)
	defer func() {
		z.mu.Lock()
		delete(z.keys, owner.Key.Digest())
		z.mu.Unlock()
	}()
	deadline := time.Now().Add(z.retain)
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-z.stop:
				t.Stop()
				z.dropped.Add(1)
				return
			case <-t.C:
			}
		}
		backoff = min(max(2*backoff, resolveFirstBackoff), resolveMaxBackoff)
		if time.Now().After(deadline) {
			return // the record expired: nothing is held any more
		}
		done, err := z.ask(r, key, owner)
		if done {
			return
		}
		_ = err
	}
}

// ask asks once; done reports that the key needs no more questions.
func (z *resolver) ask(r *http.Request, key string, owner idem.Owner) (done bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	go func() {
		select {
		case <-z.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if owner.Fence == 0 {
		rec, err := idem.Lookup(ctx, z.store, owner.Key.Digest())
		switch {
		case err != nil && !idem.IsUnavailable(err):
			return true, err // gone, or a store without Lookup
		case err != nil:
			z.failed.Add(1)
			return false, err
		case rec.State != idem.StateHeld:
			return true, nil
		}
		owner.Fence = rec.Fence
	}
	z.asked.Add(1)
	ans, err := z.fn(ctx, key, r)
	if err != nil {
		z.failed.Add(1)
		return false, err
	}
	res := idem.Resolution{Digest: owner.Key.Digest(), Fence: owner.Fence, Release: ans.NeverHappened}
	if !ans.NeverHappened {
		b, err := EncodeResponse(ans.Status, ans.Header, ans.Body)
		if err != nil {
			z.failed.Add(1)
			return false, err
		}
		res.Result = b
	}
	switch err := idem.Resolve(ctx, z.store, res); {
	case err == nil:
		if res.Release {
			z.released.Add(1)
		} else {
			z.resolved.Add(1)
		}
		if z.counted != nil {
			z.counted(res.Release)
		}
		return true, nil
	case errors.Is(err, idem.ErrNotHeld), errors.Is(err, idem.ErrNotFound), errors.Is(err, idem.ErrNoResolver):
		return true, err // resolved by someone else, expired, or a store that cannot
	default:
		z.failed.Add(1)
		return false, err
	}
}

func (z *resolver) close() {
	z.mu.Lock()
	if !z.stopped {
		z.stopped = true
		close(z.stop)
	}
	z.mu.Unlock()
	z.wg.Wait()
}

func (z *resolver) stats() ResolverStats {
	return ResolverStats{
		Pending: z.pending.Load(), Asked: z.asked.Load(), Failed: z.failed.Load(),
		Resolved: z.resolved.Load(), Released: z.released.Load(), Dropped: z.dropped.Load(),
	}
}

// ResolverStats returns the counts of the resolve requests (zero without
// Config.ResolveFunc).
func (m *Middleware) ResolverStats() ResolverStats {
	if m.resolver == nil {
		return ResolverStats{}
	}
	return m.resolver.stats()
}

// Close stops the background resolve requests (Config.ResolveFunc) and
// waits for them; their keys stay held. It is safe to call more than once;
// without a ResolveFunc it does nothing.
func (m *Middleware) Close() error {
	if m.resolver != nil {
		m.resolver.close()
	}
	return nil
}
