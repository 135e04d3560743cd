// Package observe holds the observation types every idem adapter reports
// to: the HTTP middleware (httpidem), the gRPC and Connect interceptors
// (grpcidem, connectidem). One hook, one Prometheus collector
// (promidem) or one OpenTelemetry observer (otelidem) serves them all;
// each Event, StoreCall and PhaseEnd says which Protocol it comes from.
//
// It imports only the standard library and the root package. The root's
// claim engine (idem.Claimer, idem.Attempt), on which every adapter is
// built, reports its store calls and phases to an idem.AttemptObserver:
// ForAttempts makes one of an Observer.
//
// # Decisions
//
// Observer.Decided gets an Event per decision: exactly one final decision
// per protected request (Decision.Final), and DecisionAcquired before it
// when the claim was granted. Observer.StoreCall gets each store call with
// its latency and error.
//
// # Phases
//
// An Observer that is also a PhaseObserver is told when each phase of a
// keyed request starts and ends (idem.PhaseDecide, idem.PhaseWork, idem.PhaseComplete),
// and gives each phase the context it runs with: a tracer starts a span
// there, and the protected work's own spans nest under the work phase's.
//
// # Keys
//
// No observer ever sees the raw key: Event.Digest is the key's digest
// (the SHA-256 of scope and key that stores keep), and Event.Key and the
// key argument of StartPhase its short hashed form, as the log lines carry
// it.
package observe
