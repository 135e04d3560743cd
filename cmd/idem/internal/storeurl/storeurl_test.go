package storeurl

import (
	"regexp"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/configtest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dsn      string
		kind     Kind
		redacted string
		errHas   string
	}{
		{dsn: "memory:", kind: Memory, redacted: "memory:"},
		{dsn: "sqlite:idem.db", kind: SQLite, redacted: "sqlite:idem.db"},
		{dsn: "sqlite:/var/lib/idem/idem.db", kind: SQLite, redacted: "sqlite:/var/lib/idem/idem.db"},
		{dsn: "postgres://app:s3cret@db:5432/pay?sslmode=disable", kind: Postgres, redacted: "postgres://app:xxxxx@db:5432/pay?sslmode=disable"},
		{dsn: "postgresql://app@db/pay", kind: Postgres, redacted: "postgresql://app@db/pay"},
		{dsn: "mysql://root:pw@127.0.0.1:3306/test", kind: MySQL, redacted: "mysql://root:xxxxx@127.0.0.1:3306/test"},
		{dsn: "redis://127.0.0.1:6379/0", kind: Redis, redacted: "redis://127.0.0.1:6379/0"},
		{dsn: "redis://:hunter2@127.0.0.1:6379/1", kind: Redis, redacted: "redis://:xxxxx@127.0.0.1:6379/1"},
		{dsn: "postgres://app@db/pay?password=s3cret&sslmode=require", kind: Postgres, redacted: "postgres://app@db/pay?password=xxxxx&sslmode=require"},
		{dsn: "postgres://app@db/pay?sslmode=verify-full&sslpassword=keypw&sslkey=/k.pem", kind: Postgres, redacted: "postgres://app@db/pay?sslmode=verify-full&sslpassword=xxxxx&sslkey=/k.pem"},
		{dsn: "postgres://app:a@db/pay?PASSWORD=b", kind: Postgres, redacted: "postgres://app:xxxxx@db/pay?PASSWORD=xxxxx"},
		{dsn: "mysql://root@127.0.0.1:3306/test?password=pw2&parseTime=true", kind: MySQL, redacted: "mysql://root@127.0.0.1:3306/test?password=xxxxx&parseTime=true"},

		{dsn: "", errHas: "no scheme"},
		{dsn: "idem.db", errHas: "no scheme"},
		{dsn: "memory:x", errHas: "takes no address"},
		{dsn: "sqlite:", errHas: "needs a file path"},
		{dsn: "sqlite::memory:", errHas: "its own empty database"},
		{dsn: "sqlite://:memory:", errHas: "its own empty database"},
		{dsn: "oracle://u:topsecret@h/db", errHas: "unknown scheme"},
		{dsn: "postgres://u:topsecret@/db", errHas: "missing host"},
		{dsn: "postgres://u:topsecret@h:99999999999/db", errHas: "URL"},
		{dsn: "mysql://u:topsecret@h:3306", errHas: "missing database"},
		{dsn: "mysql://u:topsecret@h:3306/a/b", errHas: "missing database"},
		{dsn: "redis://u:topsecret@h:6379/notanumber", errHas: "invalid DSN"},
		{dsn: "postgres://u:top%zzsecret@h/db", errHas: "URL"},
		{dsn: "postgres://u@h:99999999999/db?password=topsecret", errHas: "URL"},
		{dsn: "redis://127.0.0.1:6379/0?password=topsecret", errHas: "unexpected option"},
		{dsn: "oracle://h/db?sslpassword=topsecret", errHas: "unknown scheme"},
		{dsn: "postgres://@/db?password=topsecret", errHas: "missing host"},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			d, err := Parse(tt.dsn)
			if tt.errHas != "" {
				if err == nil {
					t.Fatalf("Parse(%q) succeeded, want error containing %q", tt.dsn, tt.errHas)
				}
				configtest.Want(t, err, "", "DSN")
				msg := err.Error()
				if !strings.Contains(msg, tt.errHas) {
					t.Errorf("error %q does not contain %q", msg, tt.errHas)
				}
				if strings.Contains(msg, "topsecret") {
					t.Errorf("error leaks the password: %q", msg)
				}
				if strings.Contains(msg, "\n") {
					t.Errorf("error is not one line: %q", msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.dsn, err)
			}
			if d.Kind != tt.kind || d.String() != tt.redacted {
				t.Errorf("Parse(%q) = %v %q, want %v %q", tt.dsn, d.Kind, d.String(), tt.kind, tt.redacted)
			}
		})
	}
}

func FuzzParseNeverLeaksPassword(f *testing.F) {
	for _, s := range []string{
		"postgres://u:%s@h/db", "mysql://u:%s@h:1/db", "redis://:%s@h:1/0", "weird://u:%s@", "postgres://u:%s@h:x/db",
		"postgres://u@h/db?password=%s", "postgres://u@h/db?sslmode=require&sslpassword=%s", "mysql://u@h:1/db?password=%s",
		"redis://h:1/0?password=%s", "weird://h/db?password=%s", "postgres://u@h:x/db?Password=%s", "postgres://u@/db?password=%s",
		"postgres://u@h/db?password=%s&bad=%zz",
	} {
		f.Add(s, "Secr3tPw")
	}
	f.Fuzz(func(t *testing.T, format, pw string) {
		if len(pw) < 6 || strings.ContainsAny(pw, "@/:?#%[] \\") || strings.Count(format, "%s") != 1 {
			return
		}
		if !passwordPosition(format) {
			return // a host, a path or a plain parameter: shown as it is
		}
		dsn := strings.Replace(format, "%s", pw, 1)
		d, err := Parse(dsn)
		if err != nil {
			if strings.Contains(err.Error(), pw) && !strings.Contains(strings.Replace(format, "%s", "", 1), pw) {
				t.Fatalf("Parse(%q) error leaks the password: %v", dsn, err)
			}
			return
		}
		if strings.Contains(d.String(), pw) && !strings.Contains(strings.Replace(format, "%s", "", 1), pw) {
			t.Fatalf("redacted form %q leaks the password", d.String())
		}
	})
}

var (
	userinfoPassword = regexp.MustCompile(`://[^/?#@]*:$`)
	queryValue       = regexp.MustCompile(`[?&]([^=&?#]*)=$`)
)

// passwordPosition reports whether the "%s" in format stands where a
// password goes: after "://user:" and before "@", or as the value of a
// secret query parameter (password=, sslpassword=, …).
func passwordPosition(format string) bool {
	i := strings.Index(format, "%s")
	prefix, suffix := format[:i], format[i+2:]
	if userinfoPassword.MatchString(prefix) && strings.HasPrefix(suffix, "@") {
		return true
	}
	if m := queryValue.FindStringSubmatch(prefix); m != nil && secretParam(m[1]) && !strings.Contains(prefix, "#") {
		return suffix == "" || strings.HasPrefix(suffix, "&") || strings.HasPrefix(suffix, "#")
	}
	return false
}
