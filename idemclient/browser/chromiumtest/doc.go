// Package chromiumtest tests idem.js (package idemclient/browser) in
// headless Chromium, driven over the Chrome DevTools Protocol with
// chromedp, against a real idem proxy process built from ./cmd/idem in
// front of an upstream that counts effects per key.
//
// It is its own module so that the core module never requires chromedp.
// Run it from this directory:
//
//	go test -race -count=1 .
//
// It needs Chromium (/usr/bin/chromium, or IDEM_CHROMIUM); without it the
// tests skip, unless IDEM_REQUIRE_SERVICES=1, when they fail.
package chromiumtest
