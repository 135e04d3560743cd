// Package oteltest is the rig of otelidem's tests: the idempotency
// middleware over memstore, observed by otelidem into an in-memory span
// recorder and metric reader, and the checks on what it recorded (span
// trees, no raw key in any attribute, the counters).
package oteltest
