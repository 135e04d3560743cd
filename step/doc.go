// Package step runs a keyed operation as named steps that resume where
// they stopped: a retry of the key (after a crash, a lost lease, an
// error) skips every step that finished, hands its stored result to the
// code after it, and runs from the first unfinished one. It is built on
// idem's one engine: the same key, claim, lease, fence and store as
// idem.Do, which it is used like.
//
//	receipt, err := step.Do(ctx, store, key, nil, func(ctx context.Context, op *step.Op) (Receipt, error) {
//		order, err := step.Run(ctx, op, "reserve", nil, reserve)         // local: SaveWith in its transaction
//		if err != nil {
//			return Receipt{}, err
//		}
//		charge, err := step.Run(ctx, op, "charge", nil, func(ctx context.Context, s *step.Step) (Charge, error) {
//			return provider.Charge(ctx, order.Total, s.Key()) // the step's derived key: the provider deduplicates
//		})
//		…
//	})
//
// Each step's result is its recovery point, stored under the key (in
// Table_steps for sqlstore, beside the record in memstore) when the step
// finishes; the operation's result is stored as idem.Do stores it. See
// docs/steps.md for when to use steps rather than one idem.Do.
//
// # Local and foreign steps
//
// Local steps write to the store's own SQL database: they save their
// recovery point in their own transaction (Step.SaveWith with
// sqlstore.Store.StepTx), so their writes and the point commit together or
// not at all, and the step is exactly once. With the store elsewhere
// (redisstore, memstore, tiered) the point is a write of its own after the
// commit: such a step is at least once, unless its writes are idempotent
// (keyed by Step.Key under a unique index).
//
// Foreign steps call another service. Step.Key is a key derived from the
// operation's key and the step's name, stable across retries and
// different per step: sent as that service's idempotency key (idem's
// client through idem proxy, a provider's key) it makes the foreign
// effect once. A foreign call without such a key has an unknown outcome
// when the process dies after sending it: give it the HoldUnknown policy,
// and a retry holds the key as outcome-unknown instead of calling twice.
// The held record names the step and the steps that finished before it
// (idem.HeldStep), so 'idem keys list --state held', the proxy's
// operations page and httpidem's resolver show which step to look up.
//
// # Fences, compensation and abandoned operations
//
// Fencing: a recovery point is saved only while the claim is held (the
// store checks the owner's token and fence in the same atomic step), so an
// owner that lost its lease cannot save a step after the new owner has.
// Give the steps' own writes the fence too (Op.Owner).
//
// Compensation: a step may declare how to undo itself (Options.Compensate).
// When a later step fails for good (Permanent), Do runs the compensations
// of the finished steps in reverse order, each once (each is a recovery
// point of its own), and completes the key with a *FailedError.
//
// Finishing abandoned operations: a Completer resumes the operations an
// application names (KeysFunc) from their recovery points, a bounded
// number of attempts each, and holds the key when it gives up.
//
// Handlers: a handler behind httpidem's middleware (or any code whose
// context runs under a claim) calls Load with the request's context and
// runs its steps with Run; an *UnknownError is answered with
// httpidem.OutcomeUnknown. A message handler (package inbox) runs the
// message's steps with Do under inbox.MessageKey: a redelivery after a
// crash in the middle of the handler resumes after the finished steps.
//
// # What is not promised
//
// A foreign step without a derived key that its
// service honours runs again after a crash between its call and its
// recovery point, unless it is HoldUnknown; a compensation is exactly
// once only in the same sense as a step (local, or keyed by its derived
// key). Recovery points last as long as the key's record: an operation
// retried after its record expired starts over.
package step
