package httpidem

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// A stored response keeps the Content-Encoding the handler chose for the
// first request (a gzip middleware inside the section compresses for a
// client that asked for gzip). A retry that does not accept that encoding
// must not get those bytes: a gzip body is decoded for it and replayed in
// its identity form (without Content-Encoding and Content-Length); any
// other encoding it does not accept is refused with 406
// encoding-not-accepted, since only gzip can be decoded here. A request
// without Accept-Encoding accepts only the identity form: clients that
// decode gzip say so (Go's http.Client, browsers, curl --compressed).

// replayable returns resp as the retry r can read it, or false when its
// encoding is one r does not accept and cannot be decoded; h is the
// header the response is replayed with (its stored header, in place).
func (m *Middleware) replayable(r *http.Request, h http.Header, resp *storedResponse) (ok bool, detail string) {
	ce := strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding")))
	if ce == "" || ce == "identity" || len(resp.Body) == 0 || acceptsEncoding(r.Header["Accept-Encoding"], ce) {
		return true, ""
	}
	if ce != "gzip" && ce != "x-gzip" {
		return false, "the stored response is encoded with " + strconv.Quote(ce) + "; retry with an Accept-Encoding that allows it"
	}
	zr, err := gzip.NewReader(bytes.NewReader(resp.Body))
	if err != nil {
		return false, "the stored response is not valid gzip; retry with Accept-Encoding: gzip"
	}
	defer zr.Close()
	var out bytes.Buffer
	limit := int64(max(m.cfg.MaxResponse, len(resp.Body)))
	n, err := out.ReadFrom(io.LimitReader(zr, limit+1))
	if err != nil || n > limit {
		return false, "the stored response cannot be decoded within the response limit; retry with Accept-Encoding: gzip"
	}
	resp.Body = out.Bytes()
	delete(h, "Content-Encoding")
	delete(h, "Content-Length")
	return true, ""
}

// acceptsEncoding reports whether the Accept-Encoding lines accept the
// content coding ce (RFC 9110 §12.5.3): listed, or matched by "*", with a
// q above 0. No line at all accepts only the identity form.
func acceptsEncoding(lines []string, ce string) bool {
	star := false
	for _, line := range lines {
		for _, item := range strings.Split(line, ",") {
			name, params, _ := strings.Cut(item, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
						q = f
					}
				}
			}
			switch {
			case name == ce || (ce == "gzip" && name == "x-gzip") || (ce == "x-gzip" && name == "gzip"):
				return q > 0
			case name == "*":
				star = q > 0
			}
		}
	}
	return star
}
