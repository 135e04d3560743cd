package idem

import (
	"bytes"
	"encoding/json"
)

// HeldStep names the step of an operation of steps (package step) that a
// held key is held in: a step with the HoldUnknown policy that started
// and never finished, so its outcome is unknown. Finished are the steps
// of the operation that finished before it, in the order the operation
// reached them (the last MaxHeldFinished). The hold stores it with the
// held result, in the same atomic step as the held state (Store.Hold), so
// 'idem keys', the operations page and the resolver read it from the
// record they list, with no other read.
type HeldStep struct {
	Name     string   `json:"step"`
	Finished []string `json:"finished,omitempty"`
}

// MaxHeldFinished is how many finished steps a HeldStep keeps: the last
// ones before the held step.
const MaxHeldFinished = 32

// heldStepPrefix begins Do's outcome-unknown result when it names a step:
// heldExact, then the JSON of a HeldStep.
const heldStepPrefix = heldExact + " step "

// OutcomeUnknownStepResult is OutcomeUnknownResult naming the step the key
// is held in: what step.Do holds a key with. A later Do (or step.Do) that
// replays it returns ErrOutcomeUnknown, as for OutcomeUnknownResult;
// HeldStepOf reads the step back.
func OutcomeUnknownStepResult(h HeldStep) []byte {
	if len(h.Finished) > MaxHeldFinished {
		h.Finished = h.Finished[len(h.Finished)-MaxHeldFinished:]
	}
	data, _ := json.Marshal(h) // strings and a slice of them: never fails
	return append([]byte(heldStepPrefix), data...)
}

// HeldStepOf returns the step that result, a held record's result written
// by OutcomeUnknownStepResult, names; false for any other result (Do's
// OutcomeUnknownResult, as earlier releases wrote it, names none).
func HeldStepOf(result []byte) (HeldStep, bool) {
	rest, ok := bytes.CutPrefix(result, []byte(heldStepPrefix))
	if !ok {
		return HeldStep{}, false
	}
	var h HeldStep
	if err := json.Unmarshal(rest, &h); err != nil || h.Name == "" {
		return HeldStep{}, false
	}
	return h, true
}

// IsOutcomeUnknownResult reports whether result is Do's outcome-unknown
// result: OutcomeUnknownResult, or OutcomeUnknownStepResult naming a step.
func IsOutcomeUnknownResult(result []byte) bool {
	return string(result) == heldExact || bytes.HasPrefix(result, []byte(heldStepPrefix))
}
