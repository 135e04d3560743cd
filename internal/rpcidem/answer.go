package rpcidem

import (
	"encoding/binary"
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemkit/idem/internal/lenprefix"
)

// A stored answer, version 1:
//
//	0x01 | uvarint len + status (google.rpc.Status, proto) | uvarint len +
//	response type full name | uvarint len + response (proto) | header MD |
//	trailer MD
//
// where MD is uvarint count, then per pair uvarint len + key, uvarint len
// + value. Decoders reject unknown versions, so a record written by a later
// release is refused rather than misread.
const answerV1 = 1

// notReplayable is the record of an answer too large to store.
var notReplayable = []byte{0xff, 'n', 'r'}

// ErrNotReplayable: the answer was too large to store; only a marker was.
var ErrNotReplayable = errors.New("not replayable")

// Answer is a call's outcome as stored: a status (code 0 for success), the
// response message on success, and the metadata the handler set.
type Answer struct {
	Status   *spb.Status
	Response proto.Message
	Header   map[string][]string
	Trailer  map[string][]string
}

// Code returns the answer's status code.
func (a Answer) Code() uint32 { return uint32(StatusOf(a.Status).GetCode()) }

// Encode returns the stored form of a.
func Encode(a Answer) ([]byte, error) {
	stBytes, err := proto.Marshal(StatusOf(a.Status))
	if err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	var name string
	var respBytes []byte
	if a.Code() == OK {
		m := a.Response
		if m == nil {
			return nil, errors.New("a successful answer without a response message")
		}
		name = string(m.ProtoReflect().Descriptor().FullName())
		if respBytes, err = (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
			return nil, fmt.Errorf("encode response: %w", err)
		}
	}
	b := make([]byte, 0, 16+len(stBytes)+len(name)+len(respBytes))
	b = append(b, answerV1)
	b = lenprefix.AppendBytes(b, stBytes)
	b = lenprefix.AppendBytes(b, name)
	b = lenprefix.AppendBytes(b, respBytes)
	b = appendMD(b, a.Header)
	b = appendMD(b, a.Trailer)
	return b, nil
}

// Decode reads a stored answer; ErrNotReplayable for the marker of one that
// was too large. The response is decoded into the message type registered
// under its name in protoregistry.GlobalTypes (generated code registers it).
func Decode(b []byte) (Answer, error) {
	if string(b) == string(notReplayable) {
		return Answer{}, ErrNotReplayable
	}
	if len(b) == 0 || b[0] != answerV1 {
		return Answer{}, errors.New("unknown record version")
	}
	d := lenprefix.Decoder{B: b[1:]}
	stBytes, name, respBytes := d.Bytes(), d.Bytes(), d.Bytes()
	header, trailer := readMD(&d), readMD(&d)
	if d.Err != nil {
		return Answer{}, d.Err
	}
	if len(d.B) != 0 {
		return Answer{}, errors.New("trailing bytes in record")
	}
	a := Answer{Status: &spb.Status{}, Header: header, Trailer: trailer}
	if err := proto.Unmarshal(stBytes, a.Status); err != nil {
		return Answer{}, fmt.Errorf("decode status: %w", err)
	}
	if a.Code() != OK {
		return a, nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return Answer{}, fmt.Errorf("response type %q: %w", name, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(respBytes, m); err != nil {
		return Answer{}, fmt.Errorf("decode response: %w", err)
	}
	a.Response = m
	return a, nil
}

func appendMD(b []byte, md map[string][]string) []byte {
	n := 0
	for _, vs := range md {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range md {
		for _, v := range vs {
			b = lenprefix.AppendBytes(b, k)
			b = lenprefix.AppendBytes(b, v)
		}
	}
	return b
}

// readMD reads what appendMD wrote.
func readMD(d *lenprefix.Decoder) map[string][]string {
	n := d.Count()
	if d.Err != nil {
		return nil
	}
	md := map[string][]string{}
	for range n {
		k, v := d.Bytes(), d.Bytes()
		if d.Err != nil {
			return nil
		}
		md[string(k)] = append(md[string(k)], string(v))
	}
	return md
}
