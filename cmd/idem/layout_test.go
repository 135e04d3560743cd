package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// demoOnly are the imports that belong to the demonstration: the shop's
// module and the broker clients only the shop uses.
var demoOnly = []string{"github.com/idemkit/idem/demo/", "github.com/nats-io/", "github.com/rabbitmq/"}

func demoImport(path string) bool {
	for _, p := range demoOnly {
		if strings.HasPrefix(path+"/", p) {
			return true
		}
	}
	return false
}

// TestDemoWiredInOnce: the product and the demonstration stay apart (see
// doc.go). Of the binary's own files only demo.go imports the shop, none
// imports a broker client, and no package under cmd/idem/internal reaches
// either, directly or through its dependencies.
func TestDemoWiredInOnce(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	wired := false
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			switch {
			case name == "demo.go" && path == "github.com/idemkit/idem/demo/shop":
				wired = true
			case demoImport(path):
				t.Errorf("%s imports %s: only demo.go wires the demonstration in", name, path)
			}
		}
	}
	if !wired {
		t.Error("demo.go does not import github.com/idemkit/idem/demo/shop: idem demo has no shop")
	}

	out, err := exec.Command("go", "list", "-deps", "./internal/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if demoImport(dep) {
			t.Errorf("a package under cmd/idem/internal depends on %s, which only idem demo may bring", dep)
		}
	}
}
