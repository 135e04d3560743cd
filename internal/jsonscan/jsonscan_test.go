package jsonscan

import (
	"errors"
	"testing"
)

// The strict reader reports each bad escape at the offset earlier
// releases did (stored error messages and logs quote them).
func TestCanonicalizeEscapeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string
	}{
		{`"a\`, "unterminated string at offset 2"},
		{`"a\x"`, "invalid escape at offset 2"},
		{`"\u12"`, `invalid \u escape at offset 3`},
		{`"\udc00"`, "lone low surrogate at offset 7"},
		{`"\ud800"`, "lone high surrogate at offset 7"},
		{`"\ud800\u0041"`, "lone high surrogate at offset 7"},
		{`{"a":1,"\u0061":2}`, "duplicate object key at offset 18"},
		{`[1,]`, "unexpected byte at offset 3"},
		{`{"a":1}}`, "bytes after the value at offset 7"},
	} {
		_, err := Canonicalize([]byte(tc.in))
		var se *SyntaxError
		if !errors.As(err, &se) || err.Error() != tc.want {
			t.Errorf("Canonicalize(%s) = %v; want %q", tc.in, err, tc.want)
		}
	}
	if out, err := Canonicalize([]byte(`{"b":"\ud83d\ude00","a":"\u00e9\/"}`)); err != nil || string(out) != `{"a":"é/","b":"😀"}` {
		t.Errorf("Canonicalize = %s, %v", out, err)
	}
}

// Find answers exactly in a canonical document and leniently in one the
// strict reader refuses, with the same string decoding.
func TestFind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		doc, pointer string
		want         string // the value found; "" for none
	}{
		{`{"a":{"b":[1,{"c":"x"}]}}`, "/a/b/1/c", `"x"`},
		{`{"a":{"b":[1,{"c":"x"}]}}`, "/a/b/01", ""},
		{`{"a":{"b":[1,{"c":"x"}]}}`, "", `{"a":{"b":[1,{"c":"x"}]}}`},
		{`{"a/b":1,"m~n":2}`, "/a~1b", "1"},
		{`{"a/b":1,"m~n":2}`, "/m~0n", "2"},
		{`{"\u0061":1}`, "/a", "1"},                  // names compared decoded
		{` { "k" : [ 1 , 2 ] } `, "/k/1", "2"},       // white space
		{`{"k":1,"k":{"x":2}}`, "/k/x", "2"},         // a later duplicate that has the path
		{"{\"k\xff\":1,\"id\":\"r\"}", "/id", `"r"`}, // invalid UTF-8 in a name
		{`{"k":"\ud800","id":"r"}`, "/id", `"r"`},    // a lone surrogate
		{`{"id":"r"} trailing`, "/id", `"r"`},        // bytes after the value
		{`{"id":`, "/id", ""},                        // breaks off before the value
		{`{"x":[1,2,{"id":"r"}`, "/id", ""},          // breaks off before the key
		{`id=r&x=1`, "/id", ""},                      // a form body
		{`{"a":1}`, "a", ""},                         // not a pointer
		{`{"x":"\"}","id":"r"}`, "/id", `"r"`},       // an escaped quote skipped
		{`{"\u12zz":1,"id":2}`, "/id", "2"},          // an invalid escape in a skipped name
	} {
		start, end, found := Find([]byte(tc.doc), tc.pointer)
		got := ""
		if found {
			got = tc.doc[start:end]
		}
		if got != tc.want {
			t.Errorf("Find(%q, %q) = %q (found %v); want %q", tc.doc, tc.pointer, got, found, tc.want)
		}
	}
}

// DecodeString reads what Canonicalize writes, and the lenient reading of
// a string that is not valid JSON keeps what it can.
func TestDecodeString(t *testing.T) {
	t.Parallel()
	canon, err := Canonicalize([]byte(`"tab\t nl\n quote\" é \u2028 \ud83d\ude00 \u0001"`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(DecodeString(nil, canon)), "tab\t nl\n quote\" é \u2028 😀 \x01"; got != want {
		t.Errorf("DecodeString(%s) = %q; want %q", canon, got, want)
	}
	if got, want := string(DecodeString(nil, []byte(`"\x \u12 \ud800 \udc00"`))), "x \\u12 \ufffd \ufffd"; got != want {
		t.Errorf("lenient DecodeString = %q; want %q", got, want)
	}
}
