// Package promidem gives httpidem's middleware its Prometheus metrics, as
// an httpidem.Observer. httpidem itself does not import Prometheus: a
// service that exports OpenTelemetry (otelidem) or nothing does not link
// client_golang and its protobuf dependencies.
//
//	metrics, err := promidem.New(prometheus.DefaultRegisterer)
//	if err != nil { … }
//	mw, err := httpidem.New(store, &httpidem.Config{Observer: metrics})
//
// # Metrics
//
// The names, labels and buckets are those httpidem had before the split,
// and those idem proxy serves on /metrics:
//
//   - idem_http_requests_total{outcome}: requests to protected methods by
//     the middleware's final decision, one of executed, released,
//     replayed, in_flight, mismatch, rejected, store_error, keyless,
//     not_replayable, fail_open, canceled, outcome_unknown and skipped
//     (httpidem.Decision's String). Acquired is not counted: a request
//     whose claim was granted is counted once, by how it ended.
//   - idem_http_store_duration_seconds{op}: latency of each store call,
//     op begin, complete, release or mark_started (httpidem.StoreOp).
//
// Every series exists from the start at zero, so a rate over an outcome
// that has not happened yet is 0, not absent.
//
// To count more than the defaults (by route, say) or to alert on
// particular decisions, combine Metrics with a hook:
// httpidem.Observers(metrics, httpidem.ObserverFunc(…)).
//
// # gRPC and Connect
//
// grpcidem and connectidem take an httpidem.Observer too. Their calls
// counted by a Metrics land in the same idem_http_* families, so give each
// interceptor its own Metrics, on registerers wrapped with a label that
// tells them apart, the HTTP middleware's included (a registry refuses one
// family with two label sets):
// promidem.New(prometheus.WrapRegistererWith(prometheus.Labels{"protocol":
// "grpc"}, reg)), and protocol="http" for the middleware.
//
// # Several middlewares
//
// A registry holds one set of these metrics: New on a Registerer that has
// them fails with a hint. Give each middleware its own, with a label that
// tells them apart: prometheus.WrapRegistererWith(prometheus.Labels{"api":
// "payments"}, reg).
package promidem
