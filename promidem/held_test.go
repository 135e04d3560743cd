package promidem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/promidem"
)

func TestHeld(t *testing.T) {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	for i, result := range [][]byte{idem.OutcomeUnknownResult(), idem.OutcomeUnknownResult(), []byte(`"ok"`)} {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", string(rune('a'+i)))})
		if err != nil {
			t.Fatal(err)
		}
		finish := s.Complete
		if string(result) == string(idem.OutcomeUnknownResult()) {
			finish = s.Hold // the key is held: its outcome is unknown
		}
		if err := finish(ctx, c.Owner, result); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	h, err := promidem.NewHeld(reg, s, &promidem.HeldConfig{Interval: 1})
	if err != nil {
		t.Fatal(err)
	}
	h.Resolved("operator", "release")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				got[name] = g.GetValue()
			}
			if c := m.GetCounter(); c != nil {
				got[name] = c.GetValue()
			}
		}
	}
	want := map[string]float64{
		"idem_held_keys": 2,
		"idem_resolutions_total,by=operator,how=release": 1,
		"idem_resolutions_total,by=operator,how=result":  0,
		"idem_resolutions_total,by=service,how=release":  0,
		"idem_resolutions_total,by=service,how=result":   0,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("metrics %v, want %v", got, want)
	}
}
