package pglock

import (
	"database/sql"

	"github.com/idemkit/idem/internal/peek"
)

// The session of a lease, for the tests in internal/drivertest/pglock that
// unlock behind the Lease's back (see package peek).
func init() {
	peek.PglockLeaseConn = func(ls any) *sql.Conn { return ls.(*Lease).conn }
}
