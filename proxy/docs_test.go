package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// outcomeValues are the string constants named outcome… in the package's
// code: every value X-Webhook-Dedup can carry.
func outcomeValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for k, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "outcome") || k >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[k].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, v)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// docs/delivery.md's answers table gives every X-Webhook-Dedup value the
// code can send, and no other; so does the outcome label's description in
// docs/operations.md's metrics table.
func TestOutcomesDocMatchesCode(t *testing.T) {
	want := outcomeValues(t)
	if len(want) < 10 {
		t.Fatalf("found only %d outcome constants: %v", len(want), want)
	}
	code := regexp.MustCompile("`([a-z-]+)`")
	compare := func(where string, got []string) {
		slices.Sort(got)
		got = slices.Compact(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the X-Webhook-Dedup values\n %v\nthe code has\n %v", where, got, want)
		}
	}

	doc, err := os.ReadFile("../docs/delivery.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(doc)
	i := strings.Index(md, "\n## Answers\n")
	if i < 0 {
		t.Fatal("docs/delivery.md has no Answers section")
	}
	column, seen := -1, false
	var got []string
	for line := range strings.Lines(md[i:]) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if seen {
				break
			}
			continue
		}
		seen = true
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if column < 0 {
			column = slices.IndexFunc(cells, func(c string) bool { return strings.TrimSpace(c) == "`X-Webhook-Dedup`" })
			if column < 0 {
				t.Fatal("docs/delivery.md's answers table has no X-Webhook-Dedup column")
			}
			continue
		}
		if strings.HasPrefix(line, "|---") || column >= len(cells) {
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[column], -1) {
			got = append(got, m[1])
		}
	}
	compare("docs/delivery.md's answers table", got)

	doc, err = os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `webhook_dedup_requests_total` .*$").FindString(string(doc))
	if row == "" {
		t.Fatal("docs/operations.md has no webhook_dedup_requests_total row")
	}
	_, desc, _ := strings.Cut(row, "outcome` is the answer's")
	desc, _, _ = strings.Cut(desc, "(")
	got = nil
	for _, m := range code.FindAllStringSubmatch(desc, -1) {
		got = append(got, m[1])
	}
	compare("docs/operations.md's webhook_dedup_requests_total row", got)
}
