// Package scopehash turns the values that identify a caller (HTTP headers,
// gRPC metadata) into a scope, with the one normalisation that httpidem,
// grpcidem and connectidem share: leading and trailing spaces and tabs are
// ignored, and in credentials (Authorization, Proxy-Authorization) the
// auth scheme is compared case-insensitively and every run of spaces and
// tabs counts as one space (RFC 9110 §11.1), so "Bearer t", "bearer  t"
// and "BEARER\tt" are one caller. The credentials themselves stay
// case-sensitive, and a value with no space or tab in it (no scheme, as
// "SK_live_AbC") is compared byte for byte. An empty or white-space-only
// value is no identity: it counts as absent, and a caller whose values are
// all empty is anonymous.
//
// The values are length-prefixed into one buffer and hashed once:
//
//	buf, ok = scopehash.AppendValues(buf, values, scopehash.IsCredentials(name))
//	present = present || ok
//	…
//	if present { scope = scopehash.Sum("h1:", buf) }
package scopehash
