// Package sqlenv registers the three SQL drivers the tests run on
// (jackc/pgx/v5/stdlib as "pgx", go-sql-driver/mysql as "mysql",
// modernc.org/sqlite as "sqlite") and runs a test once per dialect, each
// on a private database.
//
// It lives in the test-only module internal/drivertest, so that no driver
// reaches the go.mod of the core module or of any integration module. The
// database helpers themselves (testenv.PostgresDB, testenv.MySQLDB,
// testenv.SQLitePath) need only the standard library and live in
// internal/testenv; importing sqlenv, even only for its side effect, makes
// them usable.
package sqlenv
