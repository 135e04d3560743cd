// Command idem is the idem toolkit's binary:
//
//	idem proxy   --upstream URL [flags]     an Idempotency-Key sidecar in front of any HTTP service
//	idem migrate --store DSN                create or upgrade the record schema
//	idem keys get   --store DSN [--scope S] KEY
//	idem keys purge --store DSN [--before DURATION]
//
// DSNs: memory:, sqlite:PATH, postgres://…, mysql://user:pass@host:port/db,
// redis://host:port/db. Errors name the problem in one line and never print a
// password.
package main
