// Package storeurl turns the DSN strings of the idem command line into
// opened stores:
//
//	memory:                               in-process (memstore)
//	sqlite:PATH                           embedded SQLite file (WAL, busy timeout);
//	                                      sqlite::memory: is refused (each pooled
//	                                      connection would get its own empty database)
//	postgres://user:pass@host:port/db     PostgreSQL (pgx); postgresql:// too
//	mysql://user:pass@host:port/db        MySQL / MariaDB
//	redis://[user:pass@]host:port/db      Redis; rediss:// for TLS
//
// Redis DSNs keep go-redis's URL grammar (redis.ParseURL: db, client_name,
// protocol, dial_timeout, read_timeout, write_timeout, max_retries,
// skip_verify, …) and open a rueidis client (redisstore.NewRueidis) on the
// one server they name: address, database, username and password, TLS,
// client name and timeouts carry over (redisclient.RueidisOption). Options
// rueidis has no counterpart for (pool sizes, idle times) are accepted and
// have no effect. A server that is down at Open is reported by Prepare,
// as unavailable.
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
