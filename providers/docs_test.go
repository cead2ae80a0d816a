package providers

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docs/providers.md's presets table has one row per preset, in the order
// auto tries them (the page says so), with each preset's default TTL, its
// secret variable and the URL variable it needs.
func TestPresetsDocMatchesCode(t *testing.T) {
	const page = "../docs/providers.md"
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	md := string(doc)
	i := strings.Index(md, "\n## Presets\n")
	if i < 0 {
		t.Fatalf("%s has no Presets section", page)
	}
	var rows [][]string
	for line := range strings.Lines(md[i:]) {
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, strings.Split(strings.Trim(strings.TrimSpace(line), "|"), " | "))
		} else if len(rows) > 0 {
			break
		}
	}
	code := regexp.MustCompile("`([^`]+)`")
	ttl := regexp.MustCompile(`^(\d+) (d|h)$`)
	presets := Presets()
	if len(rows) != len(presets) {
		t.Errorf("%s's presets table has %d rows; the code has %d presets", page, len(rows), len(presets))
	}
	for n, p := range presets {
		if n >= len(rows) {
			t.Errorf("%s's presets table lacks %s", page, p.Name)
			continue
		}
		row := rows[n]
		for k := range row {
			row[k] = strings.TrimSpace(row[k])
		}
		if len(row) != 6 {
			t.Errorf("%s: row %d has %d cells, want 6", page, n+1, len(row))
			continue
		}
		if names := code.FindStringSubmatch(row[0]); names == nil || names[1] != p.Name {
			t.Errorf("%s: row %d is %s, want %s (the order auto tries them)", page, n+1, row[0], p.Name)
			continue
		}
		m := ttl.FindStringSubmatch(row[2])
		if m == nil {
			t.Errorf("%s: %s's default TTL %q is not N d or N h", page, p.Name, row[2])
		} else {
			v, _ := strconv.Atoi(m[1])
			d := time.Duration(v) * time.Hour
			if m[2] == "d" {
				d *= 24
			}
			if d != p.TTL {
				t.Errorf("%s: %s's default TTL is %s; the code's is %s", page, p.Name, row[2], p.TTL)
			}
		}
		var vars []string
		for _, c := range code.FindAllStringSubmatch(row[4], -1) {
			vars = append(vars, c[1])
		}
		want := []string{}
		if p.SecretVar != "" {
			want = append(want, p.SecretVar)
		}
		if p.URLVar != "" {
			want = append(want, p.URLVar)
		}
		if strings.Join(vars, ",") != strings.Join(want, ",") {
			t.Errorf("%s: %s's signature column names %v; the code's variables are %v", page, p.Name, vars, want)
		}
	}
}
