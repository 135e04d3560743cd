// Command idem is the idem toolkit's binary:
//
//	idem proxy   --upstream URL [flags]     an Idempotency-Key sidecar in front of any HTTP service
//	idem migrate [--store DSN] [--outbox]   create or upgrade the record schema (and the outbox tables); check a Redis server
//	idem keys get     [--store DSN] [--scope S | --header 'NAME: VALUE'...] KEY   one record, its response decoded
//	idem keys list    [--store DSN] [--state STATE] [--limit N]                   records: in flight, held, started, completed, released
//	idem keys resolve [--store DSN] KEY (--status N [--body TEXT|@FILE] | --release)   resolve a held key
//	idem keys purge   [--store DSN] [--before DURATION]                          delete expired records
//	idem outbox list|show|requeue|discard [--store DSN] [--table T]   parked messages of a transactional outbox
//	idem demo    [--compare] [--report FILE.html]  the case study (docs/case-study.md): a shop under a duplicate storm
//	idem check   URL [--path P] [flags]     test any API's Idempotency-Key handling
//	idem replay  FILE... --target URL [flags]   recorded traffic (idem proxy --record) sent again as a duplicate storm
//	idem completion bash|zsh|fish           a shell completion script
//	idem version
//	idem help [COMMAND [SUBCOMMAND]]
//
// migrate and keys use --store, else IDEM_STORE, else sqlite:idem.db: the
// store idem proxy uses by default.
//
// "idem help COMMAND" and "idem COMMAND --help" print a command's
// arguments and flags. Flags and positional arguments may be mixed; "--"
// ends the flags.
//
// DSNs: memory:, sqlite:PATH, postgres://…, mysql://user:pass@host:port/db
// (or go-sql-driver's user:pass@tcp(host:port)/db), redis://host:port/db.
// Errors are printed once, on one line that names the command run, and
// never print a password. Redis DSNs are served by a rueidis client, which
// writes no log lines of its own.
//
// Output is plain text everywhere: idem writes no colour or other terminal
// escapes, on a terminal or not, so NO_COLOR has nothing to turn off.
//
// Commands are listed in one table (commandTable in main.go): a new
// command is one line there, and one in the list above
// (TestDocListsEveryCommand checks that it is).
package main
