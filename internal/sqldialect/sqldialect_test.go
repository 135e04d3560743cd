package sqldialect

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestDialectNames(t *testing.T) {
	for _, c := range []struct {
		d     Dialect
		name  string
		ph2   string
		valid bool
	}{
		{Postgres, "postgres", "$2", true},
		{MySQL, "mysql", "?", true},
		{SQLite, "sqlite", "?", true},
		{0, "Dialect(0)", "?", false},
		{42, "Dialect(42)", "?", false},
	} {
		if got := c.d.String(); got != c.name {
			t.Errorf("String(%d) = %q, want %q", uint8(c.d), got, c.name)
		}
		if got := c.d.Placeholder(2); got != c.ph2 {
			t.Errorf("%v.Placeholder(2) = %q, want %q", c.d, got, c.ph2)
		}
		if c.d.Valid() != c.valid || (c.d.Check("x", "dialect") == nil) != c.valid {
			t.Errorf("%v: Valid = %v, Check = %v; want valid %v", c.d, c.d.Valid(), c.d.Check("x", "dialect"), c.valid)
		}
		var ce *idem.ConfigError
		if err := c.d.Check("x", "Config.Dialect"); !c.valid && (!errors.As(err, &ce) || ce.Package != "x" || ce.Field != "Config.Dialect") {
			t.Errorf("%v: Check = %#v, want a ConfigError of x for Config.Dialect", c.d, err)
		}
		got, err := Parse(c.name)
		if c.valid && (err != nil || got != c.d) {
			t.Errorf("Parse(%q) = %v, %v", c.name, got, err)
		}
		if !c.valid && err == nil {
			t.Errorf("Parse(%q) = %v, want an error", c.name, got)
		}
	}
	if Postgres.Placeholder(12) != "$12" {
		t.Errorf("Placeholder(12) = %q", Postgres.Placeholder(12))
	}
}

func TestParseName(t *testing.T) {
	for in, want := range map[string]Dialect{
		"postgres": Postgres, "PostgreSQL": Postgres, "pgx": Postgres,
		"mysql": MySQL, "MariaDB": MySQL,
		"sqlite": SQLite, "sqlite3": SQLite, "SQLITE": SQLite,
	} {
		if got, err := ParseName(in); err != nil || got != want {
			t.Errorf("ParseName(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "oracle", "postgres ", "sqlite4", "Dialect(1)"} {
		if got, err := ParseName(in); err == nil || got != 0 {
			t.Errorf("ParseName(%q) = %v, %v; want 0 and an error", in, got, err)
		} else if want := "unknown dialect " + strconv.Quote(in) + " (want postgres, mysql or sqlite)"; err.Error() != want {
			t.Errorf("ParseName(%q) error = %q, want %q", in, err, want)
		}
	}
}

func TestCheckMessages(t *testing.T) {
	if err := Dialect(0).Check("fsm", "dialect"); err == nil || err.Error() != "fsm: invalid dialect: required (fsm.Postgres, fsm.MySQL or fsm.SQLite)" {
		t.Errorf("Check(0) = %v", err)
	}
	if err := Dialect(9).Check("optlock", "dialect"); err == nil || err.Error() != "optlock: invalid dialect: unknown dialect Dialect(9) (want optlock.Postgres, optlock.MySQL or optlock.SQLite)" {
		t.Errorf("Check(9) = %v", err)
	}
}

func TestCheckIdent(t *testing.T) {
	for _, c := range []struct {
		name      string
		qualified bool
		want      string // "" = accepted, else part of the error
	}{
		{"orders", false, ""},
		{"_x9", false, ""},
		{"Orders_2", false, ""},
		{strings.Repeat("x", 63), false, ""},
		{"shop.orders", true, ""},
		{"shop.orders", false, "not a plain identifier"},
		{"a.b.c", true, "at most one dot"},
		{"", false, "empty identifier"},
		{"shop.", true, "empty identifier"},
		{".orders", true, "empty identifier"},
		{strings.Repeat("x", 64), false, "longer than 63 bytes"},
		{"shop." + strings.Repeat("x", 64), true, "longer than 63 bytes"},
		{"1orders", false, "not a plain identifier"},
		{"orders; DROP TABLE users", false, "not a plain identifier"},
		{`orders"`, false, "not a plain identifier"},
		{"st atus", false, "not a plain identifier"},
		{"id--", false, "not a plain identifier"},
		{"ördérs", false, "not a plain identifier"},
	} {
		err := CheckIdent(c.name, c.qualified)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckIdent(%q, %v) = %v, want nil", c.name, c.qualified, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrIdent)):
			t.Errorf("CheckIdent(%q, %v) = %v, want an ErrIdent containing %q", c.name, c.qualified, err, c.want)
		case c.want != "" && !strings.HasPrefix(err.Error(), `"`):
			t.Errorf("CheckIdent(%q) = %q: the message must start with the quoted name", c.name, err)
		}
	}
}

// FuzzCheckIdent holds CheckIdent to a regular-expression reference: the
// loop and the expression must agree on every input.
func FuzzCheckIdent(f *testing.F) {
	for _, s := range []string{"orders", "shop.orders", "a.b.c", "", "1x", "x;y", "ü", strings.Repeat("y", 64)} {
		f.Add(s, true)
		f.Add(s, false)
	}
	ident := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	f.Fuzz(func(t *testing.T, name string, qualified bool) {
		parts := []string{name}
		if qualified {
			parts = strings.Split(name, ".")
		}
		want := len(parts) <= 2
		for _, p := range parts {
			want = want && ident.MatchString(p)
		}
		if err := CheckIdent(name, qualified); (err == nil) != want {
			t.Fatalf("CheckIdent(%q, %v) = %v, reference says valid=%v", name, qualified, err, want)
		}
	})
}
