package pglock

import "testing"

// TestIsIdent: the fence sequence name New accepts (the driver-free half of
// TestConfigAndNames, which runs with the pgx driver in
// internal/drivertest/pglock).
func TestIsIdent(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"idem_lock_fence", "app.fence_seq", "_x9", "Seq"} {
		if !isIdent(ok) {
			t.Errorf("isIdent(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", ".", "a.", ".a", "a b", `"a"`, "a-b", "9a"} {
		if isIdent(bad) {
			t.Errorf("isIdent(%q) = true", bad)
		}
	}
}
