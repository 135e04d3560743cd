package inbox

import "github.com/idemkit/idem/internal/peek"

// The sweep statement, for the plan test and benchmark of
// internal/drivertest/inbox (see package peek).
func init() {
	peek.InboxSweepSQL = func(ib any) string { return ib.(*Inbox).stmt.sweep }
}
