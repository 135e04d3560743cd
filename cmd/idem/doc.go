// Command idem is the idem toolkit's binary:
//
//	idem proxy   --upstream URL [flags]     an Idempotency-Key sidecar in front of any HTTP service
//	idem migrate [--store DSN] [--outbox]   create or upgrade the record schema (and the outbox tables); check a Redis server
//	idem keys get     [--store DSN] [--scope S | --header 'NAME: VALUE'...] KEY   one record, its response decoded
//	idem keys list    [--store DSN] [--state STATE] [--limit N]                   records: in flight, held (with the step a key is held in), started, completed, released
//	idem keys resolve [--store DSN] KEY (--status N [--body TEXT|@FILE] | --release) [--step NAME]   resolve a held key
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
//
// # Product and demonstration
//
// This directory and cmd/idem/internal hold the product: the commands and
// what only they use. The case study that idem demo runs, a shop with its
// own payment channel and queue, is the module github.com/idemkit/idem/demo/shop
// (directory demo/shop), which demo.go alone wires in (TestDemoWiredInOnce
// checks that, and that nothing under cmd/idem/internal reaches the shop or
// a broker client). The NATS and RabbitMQ
// clients, which only the shop uses, are required by its go.mod, not by
// this one; this module's Go files are 8.5k lines without their tests,
// where they were 13.6k with the shop inside.
//
// The shop is the binary's only importer of the NATS and RabbitMQ clients
// (for idem demo --queue nats://… or amqp://…), and they stay in the
// binary: a separate module changes what go.mod files list, not what a
// binary links, so go list -deps ./cmd/idem names the same 382 packages as
// before the move and the binary is the same 61.8 MB (go build, linux/amd64).
// The brokers are 18 of those packages (nats.go with nkeys, nuid,
// klauspost/compress and golang.org/x/crypto's NaCl; amqp091-go) and about
// 0.8 MB of the 43 MB release binary (BENCHMARKS.md). Taking them out would
// take --queue's brokers away from idem demo, a flag docs/stability.md
// keeps like an API; they are kept.
package main
