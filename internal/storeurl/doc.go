// Package storeurl turns the DSN strings of the idem command line into
// opened stores:
//
//	memory:                               in-process (memstore)
//	sqlite:PATH                           embedded SQLite file (WAL, busy timeout)
//	postgres://user:pass@host:port/db     PostgreSQL (pgx); postgresql:// too
//	mysql://user:pass@host:port/db        MySQL / MariaDB
//	redis://[user:pass@]host:port/db      Redis; rediss:// for TLS
//
// # Secrets
//
// Errors name the problem in one line and never contain a password: not the
// one in the user-info part, nor one given as a query parameter
// (password=, sslpassword=, and any parameter whose name speaks of a
// password, secret, token or credential). DSN.String, every error of Parse
// and Open, and Handle.Wrap replace them with "xxxxx". A fuzz test checks
// it.
package storeurl
