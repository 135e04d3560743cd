package inboxengine_test

// The SQL drivers this package's tests open by name ("pgx", "mysql",
// "sqlite"), registered by sqlenv.
import _ "github.com/idemkit/idem/internal/drivertest/sqlenv"
