package fsm

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/configtest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestNewRejectsBadDefinitions(t *testing.T) {
	t.Parallel()
	tr := func(name, to string, from ...string) Transition { return Transition{Name: name, From: from, To: to} }
	cases := []struct {
		name, field string
		def         Definition
		wantErr     string
	}{
		{"no states", "Definition.States", Definition{Initial: "A"}, "declares no states"},
		{"no initial", "Definition.Initial", Definition{States: []string{"A"}}, "no initial state"},
		{"initial not declared", "Definition.Initial", Definition{Initial: "X", States: []string{"A"}}, `state "X" is not declared`},
		{"duplicate state", "Definition.States", Definition{Initial: "A", States: []string{"A", "A"}}, `state "A" declared twice`},
		{"bad state name", "Definition.States", Definition{Initial: "A", States: []string{"A", "B C"}}, `"B C": not a plain identifier`},
		{"duplicate transition", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B"},
			Transitions: []Transition{tr("go", "B", "A"), tr("go", "B", "A")}}, `transition "go" declared twice`},
		{"bad transition name", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B"},
			Transitions: []Transition{tr("go!", "B", "A")}}, `"go!": not a plain identifier`},
		{"unknown target", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B"},
			Transitions: []Transition{tr("go", "Z", "A")}}, `transition "go" goes to unknown state "Z"`},
		{"unknown source", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B"},
			Transitions: []Transition{tr("go", "B", "A", "Q")}}, `transition "go" comes from unknown state "Q"`},
		{"no source", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B"},
			Transitions: []Transition{tr("go", "B")}}, `transition "go" has no source state`},
		{"source twice", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B"},
			Transitions: []Transition{tr("go", "B", "A", "A")}}, `lists source state "A" twice`},
		{"self loop", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B"},
			Transitions: []Transition{tr("go", "B", "A"), tr("again", "B", "B")}}, `transition "again" loops on state "B"`},
		{"cycle", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B", "C"},
			Transitions: []Transition{tr("ab", "B", "A"), tr("bc", "C", "B"), tr("ca", "A", "C")}}, "cycle A → B → C → A"},
		{"cycle off the initial path", "Definition.Transitions", Definition{Initial: "A", States: []string{"A", "B", "C", "D"},
			Transitions: []Transition{tr("ab", "B", "A"), tr("bc", "C", "B"), tr("cd", "D", "C"), tr("db", "B", "D")}},
			"cycle B → C → D → B"},
		{"unreachable", "Definition.States", Definition{Initial: "A", States: []string{"A", "B", "C", "D"},
			Transitions: []Transition{tr("ab", "B", "A"), tr("cd", "D", "C")}}, "state(s) C, D unreachable from initial state \"A\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, err := New(SQLite, "orders", c.def, nil)
			if err == nil {
				t.Fatalf("New succeeded (%v), want error containing %q", m, c.wantErr)
			}
			if !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("New error = %q, want it to contain %q", err, c.wantErr)
			}
			configtest.Want(t, err, "fsm", c.field)
		})
	}
}

func TestNewRejectsBadNamesAndConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		field   string
		dialect Dialect
		table   string
		cfg     *Config
		wantErr string
	}{
		{"no dialect", "dialect", 0, "orders", nil, "required (fsm.Postgres"},
		{"unknown dialect", "dialect", Dialect(42), "orders", nil, "unknown dialect Dialect(42)"},
		{"empty table", "table", SQLite, "", nil, "empty identifier"},
		{"injection in table", "table", SQLite, "orders; DROP TABLE users", nil, "not a plain identifier"},
		{"quote in table", "table", Postgres, `orders"`, nil, "not a plain identifier"},
		{"two dots", "table", Postgres, "a.b.c", nil, "at most one dot"},
		{"leading digit", "table", MySQL, "1orders", nil, "not a plain identifier"},
		{"too long", "table", MySQL, strings.Repeat("x", 64), nil, "longer than 63 bytes"},
		{"bad id column", "Config.IDColumn", SQLite, "orders", &Config{IDColumn: "id--"}, "Config.IDColumn"},
		{"bad status column", "Config.StatusColumn", SQLite, "orders", &Config{StatusColumn: "st atus"}, "Config.StatusColumn"},
		{"bad version column", "Config.VersionColumn", SQLite, "orders", &Config{VersionColumn: "v)"}, "Config.VersionColumn"},
		{"same columns", "Config.VersionColumn", SQLite, "orders", &Config{StatusColumn: "id"}, "must differ"},
		{"same columns but for case", "Config.VersionColumn", MySQL, "orders", &Config{StatusColumn: "Version"}, "must differ"},
		{"bad fence column", "Config.FenceColumn", SQLite, "orders", &Config{FenceColumn: "fence;"}, "Config.FenceColumn"},
		{"fence column is status", "Config.FenceColumn", SQLite, "orders", &Config{FenceColumn: "STATUS"}, "is also the"},
		{"negative attempts", "Config.MaxAttempts", SQLite, "orders", &Config{MaxAttempts: -1}, "must be at least 1, got -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(c.dialect, c.table, orderDef(), c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("New error = %v, want it to contain %q", err, c.wantErr)
			}
			configtest.Want(t, err, "fsm", c.field)
		})
	}
	if _, err := New(Postgres, "shop.orders", orderDef(), nil); err != nil {
		t.Fatalf("schema-qualified table rejected: %v", err)
	}
}

func TestNewCopiesDefinition(t *testing.T) {
	t.Parallel()
	def := orderDef()
	m, err := New(SQLite, "orders", def, nil)
	if err != nil {
		t.Fatal(err)
	}
	def.Transitions[0].From[0] = "SHIPPED" // the caller mutates its slice afterwards
	def.States[0] = "X"
	tr, _ := m.Transition("pay")
	if tr.From[0] != "CREATED" || m.Initial() != "CREATED" {
		t.Fatalf("machine changed with the caller's definition: %+v", tr)
	}
	tr.From[0] = "Y"
	if again, _ := m.Transition("pay"); again.From[0] != "CREATED" {
		t.Fatal("Transition returned the machine's own slice")
	}
}

func TestMermaidGolden(t *testing.T) {
	t.Parallel()
	m, err := New(SQLite, "orders", orderDef(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Mermaid()
	golden := filepath.Join("testdata", "orders.mmd")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("Mermaid() =\n%s\nwant (testdata/orders.mmd):\n%s", got, want)
	}
	// doc.go shows the same diagram.
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		if !strings.Contains(string(doc), "//\t"+line+"\n") {
			t.Errorf("doc.go lacks the diagram line %q", line)
		}
	}
}

// TestClassify pins the meaning of "duplicate": the row is in the target, or in
// a state every path to which passes through the target.
func TestClassify(t *testing.T) {
	t.Parallel()
	m, err := New(SQLite, "orders", orderDef(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		transition, state string
		want              class
	}{
		{"pay", "CREATED", inSource},
		{"pay", "PAID", atOrBeyond},
		{"pay", "SHIPPED", atOrBeyond},
		{"pay", "DELIVERED", atOrBeyond},
		{"pay", "CANCELLED", illegal}, // reachable from PAID, but also straight from CREATED
		{"pay", "UNKNOWN", illegal},
		{"ship", "CREATED", illegal}, // no jump path
		{"ship", "PAID", inSource},
		{"ship", "DELIVERED", atOrBeyond},
		{"ship", "CANCELLED", illegal},
		{"cancel", "CREATED", inSource},
		{"cancel", "PAID", inSource},
		{"cancel", "CANCELLED", atOrBeyond},
		{"cancel", "SHIPPED", illegal},
		{"deliver", "PAID", illegal},
	}
	for _, c := range cases {
		tr, _ := m.Transition(c.transition)
		if got := m.classify(tr, c.state); got != c.want {
			t.Errorf("classify(%s, %s) = %d, want %d", c.transition, c.state, got, c.want)
		}
	}
}

func TestUpdateSQL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		dialect Dialect
		opts    *Options
		want    string
		nargs   int
	}{
		{Postgres, &Options{},
			"UPDATE orders SET status = $1, version = version + 1 WHERE id = $2 AND status IN ($3, $4) RETURNING version", 4},
		{Postgres, &Options{Version: ptr[int64](0), Set: map[string]any{"note": "x", "cancelled_at": "t"}},
			"UPDATE orders SET status = $1, version = version + 1, cancelled_at = $2, note = $3 WHERE id = $4 AND status IN ($5, $6) AND version = $7 RETURNING version", 7},
		{MySQL, &Options{Version: ptr[int64](3)},
			"UPDATE orders SET status = ?, version = LAST_INSERT_ID(version + 1) WHERE id = ? AND status IN (?, ?) AND version = ?", 5},
		{SQLite, &Options{},
			"UPDATE orders SET status = ?, version = version + 1 WHERE id = ? AND status IN (?, ?) RETURNING version", 4},
	}
	for _, c := range cases {
		m, err := New(c.dialect, "orders", orderDef(), nil)
		if err != nil {
			t.Fatal(err)
		}
		tr, _ := m.Transition("cancel")
		q, args, err := m.updateSQL(tr, 7, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if q != c.want || len(args) != c.nargs {
			t.Errorf("%s:\n got %s (%d args)\nwant %s (%d args)", c.dialect, q, len(args), c.want, c.nargs)
		}
	}
}
