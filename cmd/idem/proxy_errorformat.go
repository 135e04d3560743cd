package main

import (
	"net/http"
	"os"
	"strings"
	"text/template"

	"github.com/idemkit/idem/httpidem"
)

// parseErrorFormat reads --error-format: problem (nil: the middleware's
// problem+json), stripe (httpidem.StripeRefusal) or template:FILE
// (httpidem.TemplateRefusal of the file, as application/json). The
// template is parsed now, so that a mistake in it is a usage error at
// startup, not a broken refusal later.
func parseErrorFormat(v string) (func(http.ResponseWriter, *http.Request, httpidem.Problem), error) {
	switch {
	case v == "problem" || v == "":
		return nil, nil
	case v == "stripe":
		return httpidem.StripeRefusal, nil
	case strings.HasPrefix(v, "template:"):
		file := strings.TrimPrefix(v, "template:")
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usageErr("--error-format: %v", err)
		}
		t, err := template.New(file).Funcs(httpidem.TemplateFuncs).Option("missingkey=error").Parse(string(b))
		if err != nil {
			return nil, usageErr("--error-format: %v", err)
		}
		// A field the template names that a Problem lacks fails here,
		// not on the first refusal.
		if err := t.Execute(discard{}, httpidem.Problem{Type: httpidem.ProblemInFlight, Title: "t", Status: 409}); err != nil {
			return nil, usageErr("--error-format: %v", err)
		}
		return httpidem.TemplateRefusal(t, ""), nil
	}
	return nil, usageErr("--error-format %q: want problem, stripe or template:FILE", v)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
