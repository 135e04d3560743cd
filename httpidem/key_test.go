package httpidem

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 255)
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: `"abc"`, want: "abc"},
		{in: `abc`, want: "abc"},
		{in: `  "abc"	`, want: "abc"},
		{in: `8e03978e-40d5-43e8-bc93-6894a57f9324`, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{in: `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{in: `"a\"b"`, want: `a"b`},
		{in: `"a\\b"`, want: `a\b`},
		{in: `"\\\""`, want: `\"`},
		{in: `"a,b;c"`, want: `a,b;c`},
		{in: `base64+/=`, want: `base64+/=`},
		{in: `"` + long + `"`, want: long},
		{in: long, want: long},

		{in: ``, wantErr: true},
		{in: `   `, wantErr: true},
		{in: `""`, wantErr: true},
		{in: `"` + long + `k"`, wantErr: true},
		{in: long + "k", wantErr: true},
		{in: `"a b"`, wantErr: true},      // space is not visible ASCII
		{in: `a b`, wantErr: true},        // idem
		{in: `"abc`, wantErr: true},       // unterminated
		{in: `"abc\`, wantErr: true},      // unterminated escape
		{in: `"a\nb"`, wantErr: true},     // only \" and \\ escapes
		{in: `"abc";p=1`, wantErr: true},  // parameters
		{in: `"abc", "d"`, wantErr: true}, // list
		{in: `abc,def`, wantErr: true},    // looks like a list
		{in: `abc;p=1`, wantErr: true},    // looks like parameters
		{in: `ab"c`, wantErr: true},
		{in: `ab\c`, wantErr: true},
		{in: "\"a\x01b\"", wantErr: true},
		{in: "a\x7fb", wantErr: true},
		{in: "\"caf\xc3\xa9\"", wantErr: true}, // not ASCII
		{in: "café", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseKey(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseKey(%q) = %q, want an error", tt.in, got)
			} else if !errors.Is(err, idem.ErrInvalidKey) {
				t.Errorf("ParseKey(%q) error %v does not match idem.ErrInvalidKey", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// sfString quotes id as an RFC 8941 sf-string.
func sfString(id string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(id) + `"`
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b"`, `"a\\b"`, `""`, `"abc";x=1`, "a\x00", `"unterminated`, strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		id, err := ParseKey(in)
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q): error %v does not match ErrInvalidKey", in, err)
			}
			if id != "" {
				t.Fatalf("ParseKey(%q) returned %q with an error", in, id)
			}
			return
		}
		if err := idem.ValidateID(id); err != nil {
			t.Fatalf("ParseKey(%q) = %q, which is not a valid id: %v", in, id, err)
		}
		// The sf-string form always names the same key.
		if back, err := ParseKey(sfString(id)); err != nil || back != id {
			t.Fatalf("ParseKey(sfString(%q)) = %q, %v", id, back, err)
		}
		// A bare form, where one is possible, names it too.
		if !strings.ContainsAny(id, "\",;\\") {
			if back, err := ParseKey(id); err != nil || back != id {
				t.Fatalf("ParseKey(bare %q) = %q, %v", id, back, err)
			}
		}
	})
}

// TestParseKeyBareEveryByte: every byte value at every inner offset of a
// 17-byte bare key is accepted exactly when it is visible ASCII and none
// of '"', ',', ';', '\'; the key is then itself.
func TestParseKeyBareEveryByte(t *testing.T) {
	t.Parallel()
	for p := 1; p < 16; p++ {
		for b := range 256 {
			in := []byte(strings.Repeat("k", 17))
			in[p] = byte(b)
			id, err := ParseKey(string(in))
			want := b >= 0x21 && b <= 0x7e && !strings.ContainsRune(`",;\`, rune(b))
			if (err == nil) != want || (want && id != string(in)) {
				t.Fatalf("ParseKey with byte 0x%02x at offset %d = %q, %v; want valid=%v", b, p, id, err, want)
			}
		}
	}
}
