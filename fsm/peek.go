package fsm

import "github.com/idemkit/idem/internal/peek"

// The statement Fire sends, for the raw-SQL baselines of the benchmarks in
// internal/drivertest/fsm (see package peek).
func init() {
	peek.FSMUpdateSQL = func(m, t, id, opts any) (string, []any, error) {
		return m.(*Machine).updateSQL(t.(Transition), id, opts.(*Options))
	}
}
