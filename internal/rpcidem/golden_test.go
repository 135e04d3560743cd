package rpcidem

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/internal/testenv"
)

// goldenAnswers are the stored answers pinned by
// testdata/golden/answers-v1.json, the records grpcidem and connectidem
// keep: a success with its response message and metadata, an error status
// with details, an error without metadata. Each metadata map has one key,
// so that the encoding (which follows map order) is one byte string.
func goldenAnswers(t *testing.T) map[string]Answer {
	detail, err := anypb.New(wrapperspb.String("order-1 is closed"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Answer{
		"ok": {
			Status:   &spb.Status{},
			Response: wrapperspb.String("ch_1"),
			Header:   map[string][]string{"x-charge": {"ch_1", "second"}},
			Trailer:  map[string][]string{"x-done-bin": {"\x00\x01"}},
		},
		"failed precondition with details": {
			Status:  &spb.Status{Code: 9, Message: "order closed", Details: []*anypb.Any{detail}},
			Trailer: map[string][]string{"x-reason": {"closed"}},
		},
		"not found": {Status: &spb.Status{Code: 5, Message: "no such order"}},
	}
}

// TestGoldenAnswers pins the stored-answer encoding both ways. See
// docs/stability.md.
func TestGoldenAnswers(t *testing.T) {
	t.Parallel()
	cases := goldenAnswers(t)
	got := map[string]string{"not replayable": hex.EncodeToString(notReplayable)}
	for name, a := range cases {
		b, err := Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = hex.EncodeToString(b)
	}
	data, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := testenv.Golden(t, "testdata/golden/answers-v1.json", append(data, '\n'))
	var want map[string]string
	if err := json.Unmarshal(golden, &want); err != nil {
		t.Fatal(err)
	}
	for name, h := range want {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := Decode(b)
		if name == "not replayable" {
			if !errors.Is(err, ErrNotReplayable) {
				t.Errorf("%s: Decode = %v, want ErrNotReplayable", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: the committed answer no longer decodes: %v", name, err)
			continue
		}
		a, ok := cases[name]
		if !ok {
			t.Errorf("%s: a committed answer has no case in goldenAnswers", name)
			continue
		}
		if !proto.Equal(StatusOf(dec.Status), StatusOf(a.Status)) || !reflect.DeepEqual(dec.Header, nonNil(a.Header)) ||
			!reflect.DeepEqual(dec.Trailer, nonNil(a.Trailer)) || (a.Response != nil) != (dec.Response != nil) ||
			(a.Response != nil && !proto.Equal(dec.Response, a.Response)) {
			t.Errorf("%s: decoded to %+v, want %+v", name, dec, a)
		}
	}
}

func nonNil(md map[string][]string) map[string][]string {
	if md == nil {
		return map[string][]string{}
	}
	return md
}
