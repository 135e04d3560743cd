package httpidem

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestProblemTypeAnchors: every problem type URI in the repository (the
// constants built on a problems.md# base, and the links in the docs)
// names a section that exists in httpidem/problems.md, so that a client
// following a "type" lands on its explanation.
func TestProblemTypeAnchors(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile("problems.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`<a id="([a-z0-9-]+)"></a>`).FindAllStringSubmatch(string(md), -1) {
		anchors[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(md), -1) {
		anchors[githubSlug(m[1])] = true
	}
	base := regexp.MustCompile(`(\w+)\s*=\s*"https://github\.com/idemkit/idem/blob/main/([\w/]+)\.md#"`)
	literal := regexp.MustCompile(`problems\.md#([a-z0-9-]+)`)
	// The sources of each directory, read together: a constant may be
	// built on a base declared in another file of its package.
	dirs := map[string]*strings.Builder{}
	var order []string
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if dirs[dir] == nil {
			dirs[dir] = &strings.Builder{}
			order = append(order, dir)
		}
		dirs[dir].Write(b)
		dirs[dir].WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, dir := range order {
		src := dirs[dir].String()
		var names []string
		for _, m := range literal.FindAllStringSubmatch(src, -1) {
			names = append(names, m[1])
		}
		for _, m := range base.FindAllStringSubmatch(src, -1) {
			if m[2] != "httpidem/problems" {
				t.Errorf("%s: problem base %s points at %s.md, not httpidem/problems.md", dir, m[1], m[2])
				continue
			}
			for _, c := range regexp.MustCompile(`\b`+regexp.QuoteMeta(m[1])+`\s*\+\s*"([a-z0-9-]+)"`).FindAllStringSubmatch(src, -1) {
				names = append(names, c[1])
			}
		}
		for _, n := range names {
			found++
			if !anchors[n] {
				t.Errorf("%s: problem type %q has no section in httpidem/problems.md", dir, n)
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d problem type references: the scan is broken", found)
	}
}

// githubSlug is the anchor GitHub gives a heading.
func githubSlug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
