// Package oteltest is test support, not API: it holds the rig that the
// tests of otelidem and those in internal/drivertest/otelidem share (the
// idempotency middleware over memstore, observed by otelidem into an
// in-memory span recorder and metric reader). It exists because test
// files cannot be imported across modules. It makes no stability promise:
// it changes with those tests, in any release.
package oteltest
