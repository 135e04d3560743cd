// Package storeurl turns the DSN strings of the idem command line into
// opened stores:
//
//	memory:                               in-process (memstore)
//	sqlite:PATH                           embedded SQLite file (WAL, busy timeout)
//	postgres://user:pass@host:port/db     PostgreSQL (pgx); postgresql:// too
//	mysql://user:pass@host:port/db        MySQL / MariaDB
//	redis://[user:pass@]host:port/db      Redis; rediss:// for TLS
//
// Errors name the problem in one line and never contain a password.
package storeurl
