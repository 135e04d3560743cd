package idem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// TestCanonicalJSONRefuses: a body that is not exactly one JSON value in
// valid UTF-8 has no canonical form, so that two bodies a server may read
// differently never share a fingerprint.
func TestCanonicalJSONRefuses(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		`{"amount":1},{"amount":5000}`, `{"amount":1}}`, `{"amount":1} x`, `1 2`, `[1]]`, `"a""b"`,
		`{"to":"\ud800"}`, `"\udc00"`, `"\ud800\u0041"`, `"\ud800\\"`, `"\udbff"`, `"x\udfff"`,
		"\"Ren\xe9\"", "\"Ren\xe8\"", "{\"k\xff\":1}", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"",
		`{"a":1,"\u0061":2}`, `{"m":{"s":1,"s":1}}`, `[{"x":[{"y":0,"y":0}]}]`,
		"\"a\x01\"", `01`, `1.`, `.5`, `-`, `1e`, `+1`, `[1,]`, `{"a":1,}`, `{,}`, `tru`, `nulll`,
		"\xef\xbb\xbf{}", ``, ` `,
	} {
		if c, err := idem.CanonicalJSON([]byte(bad)); !errors.Is(err, idem.ErrInvalidJSON) {
			t.Errorf("CanonicalJSON(%q) = %q, %v; want ErrInvalidJSON", bad, c, err)
		}
	}
	// The replacement character itself is a character like any other.
	for _, good := range []string{`"\ufffd"`, "\"\xef\xbf\xbd\"", `"\ud83d\ude00"`, "\"\U0001F600\"", `"\u2028"`, `{"a":1,"b":{"a":2}}`} {
		if _, err := idem.CanonicalJSON([]byte(good)); err != nil {
			t.Errorf("CanonicalJSON(%q): %v", good, err)
		}
	}
}

// TestCanonicalJSONUnchanged pins the canonical form of inputs whose
// meaning did not change: it is what encoding/json wrote before, so the
// fingerprints stored by earlier releases still match.
func TestCanonicalJSONUnchanged(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"b":[1,2], "a":1}`:                    `{"a":1,"b":[1,2]}`,
		`"<&>\u003c\/"`:                         `"<&></"`,
		`"\u00e9\u2028\u2029` + "\u2028" + `"`:  `"é\u2028\u2029\u2028"`,
		`"\u0000\u001f\b\f\n\r\t\"\\\u007f"`:    `"\u0000\u001f\b\f\n\r\t\"\\` + "\x7f" + `"`,
		`{"é":1,"z":2,"\n":3,"A":4}`:            `{"\n":3,"A":4,"z":2,"é":1}`,
		` -0.0E+05 `:                            `-0.0E+05`,
		`{"x":{"z":true,"y":null},"w":[{},[]]}`: `{"w":[{},[]],"x":{"y":null,"z":true}}`,
		`"\ud83d\ude00"`:                        "\"\U0001F600\"",
	} {
		got, err := idem.CanonicalJSON([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", in, got, err, want)
		}
		if old, err := encodingJSONCanonical([]byte(in)); err != nil || !bytes.Equal(old, got) {
			t.Errorf("CanonicalJSON(%s) = %s; encoding/json wrote %s (%v)", in, got, old, err)
		}
	}
}

// FuzzCanonicalJSONSound: two inputs with one canonical form decode to
// equal values; an accepted input is valid JSON in valid UTF-8, and its
// canonical form is the one earlier releases computed with encoding/json.
func FuzzCanonicalJSONSound(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`},
		{`{"to":"\ud800"}`, `{"to":"\ufffd"}`},
		{"\"Ren\xe9\"", "\"Ren\xe8\""},
		{`{"amount":1}`, `{"amount":1},{"amount":5000}`},
		{`{"amount":1}`, `{"amount":1}}`},
		{`"\u00e9"`, "\"\xc3\xa9\""},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`[1e3,-0,0.5E-1]`, ` [ 1e3 , -0 , 0.5E-1 ] `},
		{`{"\u2028":"\/"}`, `{"` + "\u2028" + `":"/"}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca, errA := idem.CanonicalJSON(a)
		cb, errB := idem.CanonicalJSON(b)
		checkCanonical(t, a, ca, errA)
		checkCanonical(t, b, cb, errB)
		if errA == nil && errB == nil && bytes.Equal(ca, cb) {
			va, vb := decodeStd(t, a), decodeStd(t, b)
			if !reflect.DeepEqual(va, vb) {
				t.Fatalf("%q and %q share the canonical form %q but decode to %#v and %#v", a, b, ca, va, vb)
			}
		}
	})
}

func checkCanonical(t *testing.T, in, canon []byte, err error) {
	t.Helper()
	old, oldErr := encodingJSONCanonical(in)
	if err != nil {
		if !errors.Is(err, idem.ErrInvalidJSON) {
			t.Fatalf("CanonicalJSON(%q): %v, not ErrInvalidJSON", in, err)
		}
		return
	}
	if !utf8.Valid(in) || !json.Valid(in) {
		t.Fatalf("accepted %q: not valid JSON in UTF-8", in)
	}
	if oldErr != nil || !bytes.Equal(old, canon) {
		t.Fatalf("CanonicalJSON(%q) = %q; encoding/json wrote %q (%v)", in, canon, old, oldErr)
	}
	if !reflect.DeepEqual(decodeStd(t, in), decodeStd(t, canon)) {
		t.Fatalf("%q and its canonical form %q decode to different values", in, canon)
	}
	if again, err := idem.CanonicalJSON(canon); err != nil || !bytes.Equal(again, canon) {
		t.Fatalf("canonical form %q is not a fixed point: %q, %v", canon, again, err)
	}
}

func decodeStd(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("encoding/json refuses %q: %v", b, err)
	}
	return v
}

// encodingJSONCanonical is the canonical form as releases before 0.x
// computed it: decode with encoding/json (numbers as json.Number,
// duplicate keys refused) and encode again without HTML escaping. It
// accepted what CanonicalJSON now refuses (trailing bytes after a syntax
// error, invalid UTF-8, lone surrogates); on the rest the two must agree.
func encodingJSONCanonical(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeTokens(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("more than one value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func decodeTokens(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= 10000 {
		return nil, errors.New("too deep")
	}
	if d == '{' {
		obj := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string)
			if _, dup := obj[k]; dup {
				return nil, errors.New("duplicate")
			}
			if obj[k], err = decodeTokens(dec, depth+1); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token()
		return obj, err
	}
	arr := []any{}
	for dec.More() {
		v, err := decodeTokens(dec, depth+1)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
	}
	_, err = dec.Token()
	return arr, err
}

// wideArray is the 10 MiB body [0,0,...,0].
func wideArray() []byte {
	const size = 10 << 20
	b := make([]byte, 0, size)
	b = append(b, '[')
	for len(b) < size-2 {
		b = append(b, '0', ',')
	}
	return append(b[:len(b)-1], ']')
}

// BenchmarkCanonicalJSONWide: the canonical form of a 10 MiB [0,0,...]
// body; compare B/op with the body's size (encoding/json: the "encjson"
// sub-benchmark).
func BenchmarkCanonicalJSONWide(b *testing.B) {
	body := wideArray()
	for _, c := range []struct {
		name string
		fn   func([]byte) ([]byte, error)
	}{{"idem", idem.CanonicalJSON}, {"encjson", encodingJSONCanonical}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := c.fn(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("KeyFromJSON", func(b *testing.B) {
		obj := append(append([]byte(`{"request_id":"r-1","items":`), body...), '}')
		b.ReportAllocs()
		b.SetBytes(int64(len(obj)))
		for b.Loop() {
			if _, err := idem.KeyFromJSON("s", obj, "/request_id"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestCanonicalWideCost: the wide body costs its output buffer, not a
// value per element.
func TestCanonicalWideCost(t *testing.T) {
	body := wideArray()
	allocs := testing.AllocsPerRun(1, func() {
		if _, err := idem.CanonicalJSON(body); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Errorf("CanonicalJSON of [0,0,...]: %v allocations, want a handful", allocs)
	}
}
