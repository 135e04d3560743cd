package sqlstore

import (
	"context"
	"database/sql"

	"github.com/idemkit/idem"
)

// readMySQLReplication gives the verdict for MySQL and MariaDB.
//
// Not read yet: MySQL and MariaDB report ReplicationUnknown, which Begin
// allows. (The reader of semi-synchronous replication, Galera and plain
// replicas replaces this.)
func readMySQLReplication(ctx context.Context, db *sql.DB) (idem.Replication, error) {
	return idem.Replication{Mode: idem.ReplicationUnknown, Detail: "not read"}, nil
}
