package tiered

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
)

var _ idem.ReplicationReporter = (*Store)(nil)

// Replication implements idem.ReplicationReporter by reporting the durable
// store's replication: the durable store judges every claim and holds
// every result, so whether an acknowledged record survives a failover is
// its replication's to say. The fast store is a cache: it answers Replay
// only with a result the durable store completed first, and never grants
// a claim, so records a Redis failover loses are asked of the durable
// store again, and nothing is lost. Detail names both; the fast store's
// report is read within Config.FastTimeout and left out when it fails.
// A durable store that does not report its replication gives
// idem.ReplicationUnknown.
func (s *Store) Replication(ctx context.Context) (idem.Replication, error) {
	var r idem.Replication
	if dr, ok := s.durable.(idem.ReplicationReporter); ok {
		var err error
		if r, err = dr.Replication(ctx); err != nil {
			return idem.Replication{}, err
		}
		r.Detail = "durable store: " + r.String()
	} else {
		r = idem.Replication{Mode: idem.ReplicationUnknown,
			Detail: fmt.Sprintf("durable store: a %T, which does not report its replication", s.durable)}
	}
	fast := "fast store (a cache; the durable store holds what it answers)"
	if fr, ok := s.fast.(idem.ReplicationReporter); ok {
		fctx, cancel := context.WithTimeout(ctx, s.cfg.FastTimeout)
		defer cancel()
		if f, err := fr.Replication(fctx); err == nil {
			fast += ": " + f.String()
		}
	}
	r.Detail += "; " + fast
	return r, nil
}
