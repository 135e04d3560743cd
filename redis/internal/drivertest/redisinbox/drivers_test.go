package redisinbox_test

// The SQL drivers this package's tests open by name.
import (
	_ "github.com/go-sql-driver/mysql" // "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"
	_ "modernc.org/sqlite"             // "sqlite"
)
