// Package promidem gives idem's adapters their Prometheus metrics, as an
// observe.Observer: one Metrics serves httpidem's middleware, grpcidem's
// and connectidem's interceptors. httpidem itself does not
// import Prometheus: a service that exports OpenTelemetry (otelidem) or
// nothing does not link client_golang and its protobuf dependencies.
//
//	metrics, err := promidem.New(prometheus.DefaultRegisterer)
//	if err != nil { … }
//	mw, err := httpidem.New(store, &httpidem.Config{Observer: metrics})
//	in, err := grpcidem.New(store, &grpcidem.Config{Observer: metrics})
//
// # Metrics
//
// Each protocol has its own families, so that an HTTP status and an RPC
// status code never share a series and the HTTP names stay those idem
// proxy serves on /metrics:
//
//   - idem_http_requests_total{outcome}: requests to protected methods by
//     the middleware's final decision, one of executed, released,
//     replayed, in_flight, mismatch, rejected, store_error, keyless,
//     not_replayable, fail_open, canceled, outcome_unknown and skipped
//     (observe.Decision's String). Acquired is not counted: a request
//     whose claim was granted is counted once, by how it ended.
//   - idem_http_store_duration_seconds{op}: latency of each store call,
//     op begin, complete, release or mark_started (idem.StoreMethod).
//   - idem_rpc_requests_total{rpc_system,outcome} and
//     idem_rpc_store_duration_seconds{rpc_system,op}: the same for the
//     RPC interceptors, rpc_system "grpc" (grpcidem) or "connect"
//     (connectidem).
//
// OutboxObserver (an outbox.BacklogObserver for the outbox relay's
// RelayConfig.Observer) serves idem_outbox_published_total,
// idem_outbox_retried_total, idem_outbox_parked_total{reason} (reason:
// the outbox.ReasonClass of the refusal, a fixed set) and the gauges
// idem_outbox_pending_messages and idem_outbox_oldest_pending_seconds,
// the unpublished backlog and its oldest message's age, to alert on.
//
// The RPC families carry the system as a label, not in the name, because
// gRPC and Connect share their status codes and their semantics: a
// dashboard sums them or tells them apart by one label. HTTP has names of
// its own because what it counts differs (HTTP statuses).
//
// Every HTTP series exists from the start at zero, so a rate over an
// outcome that has not happened yet is 0, not absent. The series of the
// other protocols appear, all at zero, with the first call of that
// protocol: a service that serves only HTTP exports only the HTTP
// families' series.
//
// To count more than the defaults (by route, say) or to alert on
// particular decisions, combine Metrics with a hook:
// observe.Observers(metrics, observe.ObserverFunc(…)).
//
// # Several middlewares
//
// A registry holds one set of these metrics: New on a Registerer that has
// them fails with a hint. One Metrics may serve every adapter of a
// service; to keep two middlewares (or two interceptors) apart, give each
// its own Metrics on a Registerer with a label that tells them apart:
// prometheus.WrapRegistererWith(prometheus.Labels{"api": "payments"}, reg).
package promidem
