package tiered_test

// The SQL driver this package's tests open by name ("pgx").
import _ "github.com/jackc/pgx/v5/stdlib"
