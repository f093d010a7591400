package docscheck

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite README.md's snippets from the Example functions")

const readme = "../../README.md"

// marker precedes a fenced Go block in README.md and names where the block comes from:
// <!-- example: workqueue/example_test.go ExampleQueue_AddAfter -->
var marker = regexp.MustCompile(`^<!-- example: (\S+) (\w+) -->$`)

// snippet is one marked block of README.md: lines [start, end) hold its code.
type snippet struct {
	file, fn   string
	start, end int
}

func snippets(lines []string) ([]snippet, error) {
	var out []snippet
	for i, line := range lines {
		m := marker.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```go" {
			return nil, fmt.Errorf("line %d: marker not followed by a ```go block", i+1)
		}
		end := i + 2
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("line %d: unterminated block", i+1)
		}
		out = append(out, snippet{file: m[1], fn: m[2], start: i + 2, end: end})
	}
	return out, nil
}

// body returns the statements of function fn in the Go file at path, with their comments
// (the expected "// Output:" among them), unindented by one tab.
func body(path, fn string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		decl, ok := d.(*ast.FuncDecl)
		if !ok || decl.Name.Name != fn || decl.Recv != nil {
			continue
		}
		text := string(src[fset.Position(decl.Body.Lbrace).Offset+1 : fset.Position(decl.Body.Rbrace).Offset])
		var lines []string
		for _, line := range strings.Split(strings.Trim(text, "\n"), "\n") {
			lines = append(lines, strings.TrimPrefix(line, "\t"))
		}
		return strings.TrimRight(strings.Join(lines, "\n"), "\n"), nil
	}
	return "", fmt.Errorf("%s: no function %s", path, fn)
}

func TestReadmeSnippetsAreExamples(t *testing.T) {
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	snips, err := snippets(lines)
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if len(snips) < 5 {
		t.Fatalf("README.md has %d example snippets, want the package tour (at least 5)", len(snips))
	}
	// Replace from the last snippet backwards so earlier line numbers stay valid.
	for i := len(snips) - 1; i >= 0; i-- {
		s := snips[i]
		want, err := body(filepath.Join("../..", s.file), s.fn)
		if err != nil {
			t.Errorf("README.md line %d: %v", s.start, err)
			continue
		}
		if !strings.HasPrefix(s.fn, "Example") {
			t.Errorf("README.md line %d: %s is not an Example function, so it is not run", s.start, s.fn)
		}
		got := strings.Join(lines[s.start:s.end], "\n")
		if got == want {
			continue
		}
		if *update {
			lines = append(lines[:s.start], append(strings.Split(want, "\n"), lines[s.end:]...)...)
			continue
		}
		t.Errorf("README.md line %d differs from %s %s (go test ./internal/docscheck -update rewrites it):\n--- README\n%s\n--- example\n%s", s.start, s.file, s.fn, got, want)
	}
	if *update {
		out := []byte(strings.Join(lines, "\n"))
		if !bytes.Equal(out, data) {
			if err := os.WriteFile(readme, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestSnippetsParser(t *testing.T) {
	lines := strings.Split("x\n<!-- example: a/b.go ExampleX -->\n```go\nfoo()\n```\n", "\n")
	s, err := snippets(lines)
	if err != nil || len(s) != 1 || s[0].file != "a/b.go" || s[0].fn != "ExampleX" || strings.Join(lines[s[0].start:s[0].end], "\n") != "foo()" {
		t.Fatalf("snippets = %+v, %v", s, err)
	}
	for _, bad := range []string{
		"<!-- example: a.go ExampleX -->\nfoo\n",
		"<!-- example: a.go ExampleX -->\n```go\nfoo()\n",
	} {
		if _, err := snippets(strings.Split(bad, "\n")); err == nil {
			t.Errorf("snippets(%q): no error", bad)
		}
	}
	dir := t.TempDir()
	src := "package p\n\n// Doc.\nfunc ExampleX() {\n\ta := 1\n\t_ = a // keep\n\n\t// Output:\n\t// 1\n}\n"
	path := filepath.Join(dir, "x_test.go")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := body(path, "ExampleX")
	if want := "a := 1\n_ = a // keep\n\n// Output:\n// 1"; err != nil || got != want {
		t.Errorf("body = %q, %v; want %q", got, err, want)
	}
	if _, err := body(path, "ExampleY"); err == nil {
		t.Error("body of a missing function: no error")
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
