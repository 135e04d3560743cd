package sqlmigrate

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestStatements(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"comments only", "-- a\n  -- b;\n\n", nil},
		{"one", "CREATE TABLE t (a INT);\n", []string{"CREATE TABLE t (a INT)"}},
		{"no final newline", "SELECT 1;", []string{"SELECT 1"}},
		{"no final semicolon", "SELECT 1;\nSELECT 2\n", []string{"SELECT 1", "SELECT 2"}},
		{"trailing blanks after semicolon", "SELECT 1;  \t\nSELECT 2;\r\n", []string{"SELECT 1", "SELECT 2"}},
		{
			"multi-line with comments",
			"-- header;\nCREATE TABLE t (\n    a INT, -- note\n    -- dropped;\n    b INT\n);\n\n-- index\nCREATE INDEX i ON t (a);\n",
			[]string{"CREATE TABLE t (\n    a INT, -- note\n    b INT\n)", "CREATE INDEX i ON t (a)"},
		},
		{"semicolon mid-line does not split", "SELECT ';' AS x, 1;\n", []string{"SELECT ';' AS x, 1"}},
	} {
		if got := statements(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("%s: statements(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/sqlite/010_ten.sql":  {Data: []byte("CREATE TABLE {{table}}_ten (a INT);\n")},
		"m/sqlite/002_two.sql":  {Data: []byte("CREATE TABLE {{table}} (a INT);\n")},
		"m/sqlite/README.md":    {Data: []byte("not a migration")},
		"m/sqlite/sub/1_x.sql":  {Data: []byte("ignored: a directory's files are not read")},
		"m/bad/1x_name.sql":     {Data: []byte("")},
		"m/zero/000_name.sql":   {Data: []byte("")},
		"m/sign/+1_name.sql":    {Data: []byte("")},
		"m/nounder/001.sql":     {Data: []byte("")},
		"m/dup/1_a.sql":         {Data: []byte("")},
		"m/dup/001_b.sql":       {Data: []byte("")},
		"m/none/notes.txt":      {Data: []byte("")},
		"m/postgres/1_one.sql":  {Data: []byte("SELECT 1;\n")},
		"m/postgres/02_two.sql": {Data: []byte("SELECT 2;\n")},
	}
	ms, err := Load(fsys, "m/sqlite", strings.NewReplacer("{{table}}", "tok"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Migration{
		{Version: 2, File: "002_two.sql", SQL: "CREATE TABLE tok (a INT);\n"},
		{Version: 10, File: "010_ten.sql", SQL: "CREATE TABLE tok_ten (a INT);\n"},
	}
	if !slices.Equal(ms, want) {
		t.Errorf("Load = %+v, want %+v", ms, want)
	}
	if ms, err := Load(fsys, "m/postgres", nil); err != nil || len(ms) != 2 || ms[0].SQL != "SELECT 1;\n" || ms[1].Version != 2 {
		t.Errorf("Load without a replacer = %+v, %v", ms, err)
	}
	for dir, want := range map[string]string{
		"m/bad":     "1x_name.sql: the name must be NNN_name.sql",
		"m/zero":    "000_name.sql: the name must be",
		"m/sign":    "+1_name.sql: the name must be",
		"m/nounder": "001.sql: the name must be",
		"m/dup":     "have the same version",
		"m/none":    "no migrations",
		"m/missing": "read migrations",
	} {
		if _, err := Load(fsys, dir, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s) error = %v, want one containing %q", dir, err, want)
		}
	}
}
