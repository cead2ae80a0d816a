package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/delivery"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// The documentation states facts the code knows; these tests keep the two
// in step. Provider presets and X-Webhook-Dedup values are checked in their
// own packages (providers, proxy).

const configDoc = "docs/configuration.md"

var update = flag.Bool("update", false, "rewrite "+configDoc+"'s configuration table from the code")

// configTable renders config.Variables as the documentation's Markdown table.
func configTable() []byte {
	var b bytes.Buffer
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, v := range config.Variables() {
		def := "empty"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Name, def, strings.ReplaceAll(v.Description, "|", "\\|"))
	}
	return b.Bytes()
}

// docs/configuration.md's table is exactly the one the code generates
// (every variable, its default and its description, and no other).
// `go test -run Configuration -update .` regenerates it.
func TestConfigurationDocMatchesCode(t *testing.T) {
	const startMark, endMark = "<!-- config-table:start -->\n", "<!-- config-table:end -->"
	doc, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(startMark)), bytes.Index(doc, []byte(endMark))
	if i < 0 || j < i {
		t.Fatalf("%s has no config table markers", configDoc)
	}
	want := configTable()
	if *update {
		doc = append(append(append([]byte{}, doc[:i+len(startMark)]...), want...), doc[j:]...)
		if err := os.WriteFile(configDoc, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := doc[i+len(startMark) : j]; !bytes.Equal(got, want) {
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for n := range max(len(gotLines), len(wantLines)) {
			var g, w string
			if n < len(gotLines) {
				g = gotLines[n]
			}
			if n < len(wantLines) {
				w = wantLines[n]
			}
			if g != w {
				t.Errorf("%s's configuration table, line %d:\n got: %s\nwant: %s", configDoc, n+1, g, w)
			}
		}
		t.Errorf("%s's configuration table is not the generated one; run: go test -run Configuration -update .", configDoc)
	}
}

// The README's table of the main settings shows each as the generated
// table does (its meaning may be shortened, its default never differs),
// and the README names every other variable, so that each is one link
// away from the front page.
func TestREADMESettings(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]config.Variable{}
	for _, v := range config.Variables() {
		known[v.Name] = v
	}
	named := map[string]bool{}
	for _, name := range backticked(stripFences(string(readme))) {
		if _, ok := known[name]; ok {
			named[name] = true
		}
	}
	for _, v := range config.Variables() {
		if !named[v.Name] {
			t.Errorf("README.md does not name %s", v.Name)
		}
	}
	rows := tableRows(t, string(readme), "## The main settings")
	if len(rows) == 0 {
		t.Fatal("README.md has no main settings table")
	}
	for _, row := range rows {
		for _, name := range backticked(row[0]) {
			v, ok := known[name]
			if !ok {
				t.Errorf("README.md's main settings name %s, which the code does not read", name)
				continue
			}
			def := "empty"
			if v.Default != "" {
				def = "`" + v.Default + "`"
			}
			if row[1] != def {
				t.Errorf("README.md gives %s's default as %s; the code's is %s", name, row[1], def)
			}
		}
	}
}

// describer records the metrics registered through it, by name, whether
// or not they have a series yet (a labelled counter has none until its
// first event, so a scrape would miss it).
type describer struct{ names []string }

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(desc.String())
		if m == nil {
			return fmt.Errorf("no name in %s", desc)
		}
		d.names = append(d.names, m[1])
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return false }

// registeredMetrics are the names of every webhook_dedup_* metric the
// process registers: those its constructors describe (some build their
// names), and every name the code writes out in a metric's options or
// description, wherever it is registered.
func registeredMetrics(t *testing.T) []string {
	t.Helper()
	d := &describer{}
	proxy.NewMetrics(d)
	redisstore.NewMonitor(nil, redisstore.MonitorConfig{Registerer: d})
	delivery.NewMetrics(d, nil, nil)
	names := d.names
	literal := regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(webhook_dedup_[a-z0-9_]*[a-z0-9])"`)
	err := filepath.WalkDir(".", func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, "test/") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllStringSubmatch(string(src), -1) {
			names = append(names, m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// docs/operations.md's metrics table lists every metric the code registers,
// and no other.
func TestMetricsDocMatchesCode(t *testing.T) {
	doc, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, row := range tableRows(t, string(doc), "## Metrics") {
		for _, name := range backticked(row[0]) {
			if strings.HasPrefix(name, "webhook_dedup_") {
				documented = append(documented, name)
			}
		}
	}
	slices.Sort(documented)
	registered := registeredMetrics(t)
	if len(registered) < 20 {
		t.Fatalf("found only %d metrics: %v", len(registered), registered)
	}
	for _, name := range registered {
		if _, found := slices.BinarySearch(documented, name); !found {
			t.Errorf("metric %s is registered but not in docs/operations.md's metrics table", name)
		}
	}
	for _, name := range documented {
		if _, found := slices.BinarySearch(registered, name); !found {
			t.Errorf("docs/operations.md's metrics table lists %s, which the code does not register", name)
		}
	}
}

// Every relative link in README.md and docs/*.md points at a file of the
// repository, and every #fragment at a heading of its page.
func TestDocLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "README.md")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		src, err := os.ReadFile(page)
		if err != nil {
			return nil
		}
		anchors[page] = headingAnchors(string(src))
		return anchors[page]
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(src)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist", page, target)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s links to %s: a fragment of a file that is not Markdown", page, target)
			} else if !anchorsOf(path)[frag] {
				t.Errorf("%s links to %s, but %s has no heading #%s", page, target, path, frag)
			}
		}
	}
	// Every page of docs/ is reachable from the README.
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages[:len(pages)-1] {
		if !strings.Contains(string(readme), "]("+filepath.ToSlash(page)) {
			t.Errorf("README.md does not link to %s", page)
		}
	}
}

// stripFences leaves fenced code blocks out of md.
func stripFences(md string) string {
	var b strings.Builder
	fence := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if !fence {
			b.WriteString(line)
		}
	}
	return b.String()
}

// stripCode blanks fenced code blocks and inline code, where "](" is text.
func stripCode(md string) string {
	return regexp.MustCompile("`[^`]*`").ReplaceAllString(stripFences(md), "``")
}

// headingAnchors are the fragments GitHub gives a page's headings: lower
// case, punctuation dropped, spaces as hyphens, -1, -2… on repeats.
func headingAnchors(md string) map[string]bool {
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	fence := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		a := slug
		for n := 1; out[a]; n++ {
			a = fmt.Sprintf("%s-%d", slug, n)
		}
		out[a] = true
	}
	return out
}

// tableRows are the cells of the first Markdown table after heading, the
// header row and its separator left out.
func tableRows(t *testing.T, md, heading string) [][]string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("no heading %q", heading)
	}
	var rows [][]string
	inTable := false
	for line := range strings.Lines(md[i+len(heading)+2:]) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		if !inTable {
			inTable = true // the header row
			continue
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		rows = append(rows, cells)
	}
	return rows
}

// backticked are the `code` spans of a cell.
func backticked(cell string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}
