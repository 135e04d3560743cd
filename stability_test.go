package idem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestStabilityListsRootAPI: docs/stability.md lists every exported
// identifier of the root package (Name, or Type.Method) once, with its
// reader, and nothing else: adding or removing one without updating the
// list fails here.
func TestStabilityListsRootAPI(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/stability.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- root-api:begin -->", "<!-- root-api:end -->"
	text := string(doc)
	b, e := strings.Index(text, begin), strings.Index(text, end)
	if b < 0 || e < b {
		t.Fatalf("docs/stability.md has no %s ... %s block", begin, end)
	}
	listed := map[string]int{}
	readers := regexp.MustCompile(`^\| (service|store|adapter) \|`)
	ident := regexp.MustCompile("`([A-Z][A-Za-z0-9]*(?:\\.[A-Z][A-Za-z0-9]*)?)`")
	for _, line := range strings.Split(text[b+len(begin):e], "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| reader ") {
			continue
		}
		if !readers.MatchString(line) {
			t.Errorf("row without a reader (service, store or adapter): %s", line)
			continue
		}
		cols := strings.Split(line, " | ")
		for _, m := range ident.FindAllStringSubmatch(cols[len(cols)-1], -1) {
			listed[m[1]]++
		}
	}
	exported := rootExports(t)
	for _, id := range exported {
		switch listed[id] {
		case 0:
			t.Errorf("%s is exported by the root package but not listed in docs/stability.md", id)
		case 1:
		default:
			t.Errorf("%s is listed %d times in docs/stability.md", id, listed[id])
		}
	}
	for id := range listed {
		if !slices.Contains(exported, id) {
			t.Errorf("docs/stability.md lists %s, which the root package does not export", id)
		}
	}
}

// rootExports returns the exported identifiers of the root package's
// non-test files: top-level names, and Type.Method for the exported
// methods of exported types.
func rootExports(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, en := range entries {
		name := en.Name()
		if en.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "idem" {
			continue
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					out = append(out, d.Name.Name)
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				switch x := typ.(type) {
				case *ast.IndexExpr: // a generic type's method
					typ = x.X
				case *ast.IndexListExpr:
					typ = x.X
				}
				if recv := typ.(*ast.Ident).Name; ast.IsExported(recv) {
					out = append(out, recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							out = append(out, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								out = append(out, n.Name)
							}
						}
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no exported identifiers found: not run in the root package's directory?")
	}
	return out
}
