package httpidem

import (
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// notify reports decision d to the observer.
func (m *Middleware) notify(r *http.Request, key idem.Key, d observe.Decision, status int, err error) {
	if m.obs == nil {
		return
	}
	e := observe.Event{Protocol: observe.ProtocolHTTP, Decision: d, Method: r.Method, Path: r.URL.Path, Status: status, Replayed: d == observe.DecisionReplayed, Err: err}
	if !key.IsZero() {
		e.Digest = key.Digest()
	}
	m.obs.Decided(r.Context(), e)
}
