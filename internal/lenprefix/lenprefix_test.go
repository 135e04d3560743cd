package lenprefix

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTripAndStrictness(t *testing.T) {
	b := AppendBytes(nil, "ab")
	b = AppendBytes(b, []byte{})
	b = append(b, 2) // a count of 2 over the 2 bytes left
	b = AppendBytes(b, "x")
	d := Decoder{B: b}
	if got := d.Bytes(); string(got) != "ab" || cap(got) != 2 {
		t.Fatalf("Bytes = %q cap %d", got, cap(got))
	}
	if got := d.Bytes(); len(got) != 0 || d.Err != nil {
		t.Fatalf("empty Bytes = %q, %v", got, d.Err)
	}
	if n := d.Count(); n != 2 || d.Err != nil {
		t.Fatalf("Count = %d, %v", n, d.Err)
	}
	if got := d.Bytes(); string(got) != "x" || len(d.B) != 0 {
		t.Fatalf("Bytes = %q, left %d", got, len(d.B))
	}
	for name, rec := range map[string][]byte{
		"truncated varint":   {0x80},
		"non-minimal":        {0x81, 0x00},
		"length past end":    {5, 'a'},
		"count past end":     {3, 'a'},
		"overlong (11 byte)": bytes.Repeat([]byte{0xff}, 11),
	} {
		d := Decoder{B: rec}
		if name == "count past end" {
			d.Count()
		} else {
			d.Bytes()
		}
		if !errors.Is(d.Err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, d.Err)
		}
		if d.Bytes() != nil || d.Uvarint() != 0 {
			t.Errorf("%s: reads after a failure return values", name)
		}
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add([]byte{2, 'a', 'b', 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := Decoder{B: b}
		for d.Err == nil && len(d.B) > 0 {
			before := len(d.B)
			if v := d.Bytes(); len(v) > before {
				t.Fatalf("read %d of %d bytes", len(v), before)
			}
			if d.Err == nil && len(d.B) >= before {
				t.Fatal("no progress")
			}
		}
	})
}
