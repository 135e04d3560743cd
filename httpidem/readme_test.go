package httpidem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// README.md's middleware snippet is a whole program whose main is the body
// of Example_service, which the tests compile: the README cannot drift into
// code that does not build.
func TestReadmeQuotesExampleService(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippet, err := readmeServiceBlock(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_service_test.go")
	if err != nil {
		t.Fatal(err)
	}
	got, err := funcBody("README.md", snippet, "main")
	if err != nil {
		t.Fatal(err)
	}
	want, err := funcBody("example_service_test.go", string(example), "Example_service")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("README.md's main differs from Example_service's body:\nREADME:\n%s\nExample:\n%s", got, want)
	}
}

// readmeServiceBlock returns the first go block under the heading
// "## In a Go service".
func readmeServiceBlock(readme string) (string, error) {
	_, rest, ok := strings.Cut(readme, "\n## In a Go service")
	if !ok {
		return "", errorString("README.md has no \"## In a Go service\" heading")
	}
	_, rest, ok = strings.Cut(rest, "\n```go\n")
	if !ok {
		return "", errorString("README.md: no go block under \"## In a Go service\"")
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		return "", errorString("README.md: the go block under \"## In a Go service\" is not closed")
	}
	return block + "\n", nil
}

// funcBody returns the source text of the body of the function name.
func funcBody(filename, src, name string) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filename, src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name && fn.Body != nil {
			return src[fset.Position(fn.Body.Lbrace).Offset : fset.Position(fn.Body.Rbrace).Offset+1], nil
		}
	}
	return "", errorString(filename + " has no func " + name)
}

type errorString string

func (e errorString) Error() string { return string(e) }
