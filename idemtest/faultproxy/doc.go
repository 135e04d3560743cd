// Package faultproxy is a TCP proxy on loopback that puts real network
// faults between a client and its real server: a reply lost after the
// command ran, a black-holed connection, a reset in mid-reply, a refused
// server, added latency. idemtest.RunFaults runs stores through it, and
// third-party stores and tests may use it directly.
//
// It depends on the standard library only.
//
// # Sections
//
// Faults: Set switches the standing fault (Pass, BlackHole, DropReplies,
// Refuse) for every connection, open and new. DropNextReply and
// CutNextReply are one-shot faults on the next reply of any connection;
// ResetAll resets every open connection now; SetLatency delays every chunk.
// SetTarget points new connections at another server and resets the open
// ones, as a virtual IP that moves to a promoted standby does.
//
// Streams: a connection that lost bytes stays stalled until it is closed,
// because its byte stream is corrupt, as on a real network. Nothing is ever
// delivered out of order or twice.
//
// Addresses: Redirect rewrites a DSN (URL forms and go-sql-driver/mysql's
// user@tcp(host:port)/db) so that it reaches the proxy instead of the
// server.
package faultproxy
