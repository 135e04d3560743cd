// Package otelidem traces and measures idem's adapters with
// OpenTelemetry, as an observe.Observer: one Observer serves httpidem's
// middleware and grpcidem's and connectidem's interceptors.
//
//	obs, err := otelidem.New(nil) // otel's global providers
//	if err != nil { … }
//	mw, err := httpidem.New(store, &httpidem.Config{Observer: obs})
//	handler := otelhttp.NewHandler(mw.Handler(mux), "api") // the request span
//
// # Spans
//
// Each keyed request to a protected method gets up to three internal spans,
// children of the span in the request's context (the server span that
// otelhttp or other instrumentation started; without one they start a
// trace of their own):
//
//   - idem.decide: the store's decision (Store.Begin, and its polls with
//     WaitTimeout). idem.decision is the answer: acquired, replayed,
//     mismatch, in_flight, or store_error, fail_open, canceled.
//   - idem.work: the handler (and before it Store.MarkStarted, with
//     AtMostOnce).
//     Its context is the handler's, so the handler's own spans, and its
//     outgoing calls, are its children. http.response.status_code is what
//     the handler wrote.
//   - idem.complete: storing the result or releasing the claim, and the
//     answer. idem.outcome is the request's final decision.
//
// A replay or refusal has only idem.decide; a keyless or rejected request
// has none. Every span carries idem.key, the hashed key (idem.Key.String,
// as in the log lines); the raw key is never an attribute, nor is
// anything else the request carried. The request's own span gets
// idem.outcome, idem.replayed and idem.key, so server spans can be
// searched by decision. A failed store call, a panic and an unknown
// outcome are recorded as errors on the span of their phase.
//
// The decision is a phase of its own, not an attribute of the request
// span only, because its latency (a slow store, or WaitTimeout polling)
// is what an operator looks for; the work span exists so the handler's
// spans sit under the claim that protects them, and the complete span
// shows the cost of storing the response.
//
// # gRPC and Connect
//
// grpcidem and connectidem take the same Observer: their calls get the
// same three spans (the handler's context is the work span's), each with
// rpc.system ("grpc" or "connect_rpc"). The work span carries the code the
// handler answered in its own protocol's attribute: rpc.grpc.status_code
// (an integer, 0 for OK) for gRPC, rpc.connect_rpc.error_code (the error
// code's name, absent on success) for Connect; http.response.status_code
// is only ever an HTTP status. These are the attributes otelgrpc and
// otelconnect put on the server spans these spans nest under. (Newer
// semantic conventions, still a release candidate, merge both into
// rpc.response.status_code and rpc.system.name; when they are stable the
// keys here follow.) Their calls are counted in the RPC metrics below,
// never in the HTTP ones.

// # Metrics
//
//   - idem.http.requests{idem.outcome}: counter of requests by final
//     decision, the values of promidem's idem_http_requests_total
//     (acquired is not counted: the final decision follows).
//   - idem.http.store.duration{idem.op}: histogram of store call latency in
//     seconds, op begin, complete, release or mark_started, with the
//     buckets of idem_http_store_duration_seconds.
//   - idem.rpc.requests{rpc.system, idem.outcome} and
//     idem.rpc.store.duration{rpc.system, idem.op}: the same for the RPC
//     interceptors.
//   - OutboxObserver, for the outbox relay (RelayConfig.Observer):
//     idem.outbox.published, idem.outbox.retried, idem.outbox.parked{reason}
//     (counters; reason is the outbox.ReasonClass of the refusal) and idem.outbox.pending, idem.outbox.oldest_pending
//     (gauges: the unpublished backlog and its oldest message's age in
//     seconds, to alert on).
//
// The dotted names and the attribute keys follow OpenTelemetry's
// conventions, so what an exporter to Prometheus makes of them is not
// promidem's series (the labels are idem.outcome and idem.op, not outcome
// and op). Use promidem for those, alone or beside this observer
// (observe.Observers).
//
// # Clients
//
// ClientObserver is an idemclient.Observer: each attempt of an
// idemclient.Transport (its answer, what followed and why) and each wait
// become events on the span of the request's context, idem.attempt and
// idem.wait, and an outcome-unknown or given-up request marks that span as
// an error. The key is never recorded.
//
//	tr, err := idemclient.New(&idemclient.Config{Observer: otelidem.ClientObserver()})
//
// # Cost
//
// The observer adds the spans' allocations and a counter increment per
// request; without an Observer, httpidem calls nothing. Measurement
// options are built once, in New.
package otelidem
