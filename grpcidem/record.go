package grpcidem

import (
	"encoding/binary"
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
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

var errNotReplayable = errors.New("not replayable")

type answer struct {
	resp    any
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func encodeAnswer(resp any, herr error, header, trailer metadata.MD) ([]byte, error) {
	st, _ := status.FromError(herr)
	stBytes, err := proto.Marshal(st.Proto())
	if err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	var name string
	var respBytes []byte
	if herr == nil {
		m, ok := resp.(proto.Message)
		if !ok {
			return nil, fmt.Errorf("response %T is not a proto message", resp)
		}
		name = string(m.ProtoReflect().Descriptor().FullName())
		if respBytes, err = (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
			return nil, fmt.Errorf("encode response: %w", err)
		}
	}
	b := make([]byte, 0, 16+len(stBytes)+len(name)+len(respBytes))
	b = append(b, answerV1)
	b = appendBytes(b, stBytes)
	b = appendBytes(b, []byte(name))
	b = appendBytes(b, respBytes)
	b = appendMD(b, header)
	b = appendMD(b, trailer)
	return b, nil
}

func decodeAnswer(b []byte) (answer, error) {
	if string(b) == string(notReplayable) {
		return answer{}, errNotReplayable
	}
	if len(b) == 0 || b[0] != answerV1 {
		return answer{}, errors.New("unknown record version")
	}
	d := decoder{b: b[1:]}
	stBytes, name, respBytes := d.bytes(), d.bytes(), d.bytes()
	header, trailer := d.md(), d.md()
	if d.err != nil {
		return answer{}, d.err
	}
	if len(d.b) != 0 {
		return answer{}, errors.New("trailing bytes in record")
	}
	var a answer
	a.header, a.trailer = header, trailer
	var sp spb.Status
	if err := proto.Unmarshal(stBytes, &sp); err != nil {
		return answer{}, fmt.Errorf("decode status: %w", err)
	}
	if st := status.FromProto(&sp); st.Err() != nil {
		a.err = st.Err()
		return a, nil
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return answer{}, fmt.Errorf("response type %q: %w", name, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(respBytes, m); err != nil {
		return answer{}, fmt.Errorf("decode response: %w", err)
	}
	a.resp = m
	return a, nil
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendMD(b []byte, md metadata.MD) []byte {
	n := 0
	for _, vs := range md {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range md {
		for _, v := range vs {
			b = appendBytes(b, []byte(k))
			b = appendBytes(b, []byte(v))
		}
	}
	return b
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("truncated record")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errors.New("truncated record")
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) md() metadata.MD {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errors.New("truncated record")
		return nil
	}
	md := metadata.MD{}
	for range n {
		k, v := d.bytes(), d.bytes()
		if d.err != nil {
			return nil
		}
		md.Append(string(k), string(v))
	}
	return md
}
