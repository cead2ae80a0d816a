package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The layers docs/architecture.md draws, kept true: each rule names the
// packages it holds (from, less except) and what none of them may link
// (forbid), directly or through any package they import. Test files are
// not counted: a test may import a harness or a store. Our own packages are
// written relative to the module ("." is main, "x/..." is x and below);
// others by their full path.
var layerRules = []struct {
	name   string
	from   []string
	except []string
	// forbid lists what the packages may not link; onlyStd forbids
	// everything outside the standard library.
	forbid  []string
	onlyStd bool
	// pending, when set, says why the rule does not hold yet: its
	// violations are logged, not failed, and the rule failing to fail is
	// an error, so the note is removed the day it holds.
	pending string
}{
	{
		name:    "the contract imports only the standard library",
		from:    []string{"dedup"},
		onlyStd: true,
	},
	{
		name:   "the HTTP side links no database driver and no store",
		from:   httpPackages,
		forbid: append(slices.Clone(drivers), storePackages...),
	},
	{
		name:   "stores import nothing of the HTTP side, the configuration or the composition root",
		from:   storePackages,
		forbid: append(slices.Clone(httpPackages), "config", "internal/app/..."),
	},
	{
		name:   "only main imports the composition root",
		from:   []string{"..."},
		except: []string{".", "internal/app/..."},
		forbid: []string{"internal/app/..."},
	},
	{
		name:   "only tests and other harnesses import the test harnesses",
		from:   []string{"..."},
		except: append([]string{"test/..."}, harnesses...),
		forbid: harnesses,
	},
	{
		name:   "the configuration imports neither delivery nor admin",
		from:   []string{"config"},
		forbid: []string{"delivery", "admin"},
	},
	{
		name:   "the configuration imports neither proxy nor upstream",
		from:   []string{"config"},
		forbid: []string{"proxy", "upstream"},
	},
}

var (
	// httpPackages handle requests; they reach a store only through the
	// interfaces of dedup.
	httpPackages = []string{"proxy", "admin/...", "delivery", "upstream", "signature", "providers"}
	// storePackages are the stores and what they share.
	storePackages = []string{"dedup/memstore", "dedup/diskstore/...", "dedup/redisstore/...", "dedup/pgstore/...", "dedup/dynamostore/...", "dedup/internal/..."}
	// drivers are the database clients only stores may link.
	drivers   = []string{"github.com/jackc/pgx/...", "github.com/redis/go-redis/...", "go.etcd.io/bbolt/...", "github.com/aws/..."}
	harnesses = []string{"internal/testenv/...", "dedup/storetest/..."}
)

// layers places every package of the module in docs/architecture.md's
// drawing: a package imports only from its own layer and those below.
// beside are the packages outside the drawing (tests, their harnesses,
// examples), which may import any layer and are imported by none
// (layerRules keeps that).
var (
	layers = []struct {
		name     string
		packages []string
	}{
		{"the contract and the shared vocabulary", []string{"dedup", "policy", "setting"}},
		{"stores and webhook formats", slices.Concat(storePackages, []string{"providers", "signature"})},
		{"configuration", []string{"config"}},
		{"libraries", []string{"internal/server", "internal/tracing", "internal/memlimit", "internal/intake"}},
		{"the request path", []string{"proxy", "delivery", "upstream", "admin/..."}},
		{"the composition root", []string{"internal/app/..."}},
		{"the process", []string{"."}},
	}
	beside = slices.Concat(harnesses, []string{"test/...", "examples/...", "k8s/..."})
)

// listedPackage is what the rules read of `go list -json`.
type listedPackage struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
	Module     *struct {
		Path string
		Main bool
	}
}

// modulePackages lists the module's packages and every package they link,
// by import path, and returns the module's path.
func modulePackages(t *testing.T) (module string, pkgs map[string]listedPackage) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json", "./...").Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go list: %v\n%s", err, exit.Stderr)
	}
	if err != nil {
		t.Fatalf("go list (the go command must be on PATH): %v", err)
	}
	pkgs = map[string]listedPackage{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		pkgs[p.ImportPath] = p
		if p.Module != nil && p.Module.Main {
			module = p.Module.Path
		}
	}
	if module == "" {
		t.Fatal("go list named no package of the main module")
	}
	return module, pkgs
}

// matches reports whether path is named by pattern (see layerRules).
func matches(module, pattern, path string) bool {
	if first, _, _ := strings.Cut(pattern, "/"); pattern == "." || pattern == "..." || !strings.Contains(first, ".") {
		pattern = strings.TrimSuffix(module+"/"+pattern, "/.")
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

func matchesAny(module string, patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(module, p, path) })
}

// short names a package of the module relative to it, as the rules do.
func short(module, path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// importChain is the shortest chain of imports from one package to
// another it links, for a message that shows where a line is crossed.
func importChain(pkgs map[string]listedPackage, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			chain := []string{}
			for ; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range pkgs[p].Imports {
			if _, seen := prev[next]; !seen {
				prev[next] = p
				queue = append(queue, next)
			}
		}
	}
	return []string{from, "…", to}
}

// TestLayers fails when a package imports across a line of
// docs/architecture.md's drawing, printing the chain of imports that does.
func TestLayers(t *testing.T) {
	module, pkgs := modulePackages(t)
	var own, linked []string
	for path, p := range pkgs {
		if matches(module, "...", path) {
			own = append(own, path)
		} else if !p.Standard {
			linked = append(linked, path)
		}
	}
	slices.Sort(own)
	short := func(path string) string { return short(module, path) }

	for _, rule := range layerRules {
		t.Run(rule.name, func(t *testing.T) {
			// A pattern that names nothing would make the rule pass
			// whatever the code does (a package moved, a typo).
			for _, pat := range slices.Concat(rule.from, rule.except, rule.forbid) {
				if !slices.ContainsFunc(slices.Concat(own, linked), func(p string) bool { return matches(module, pat, p) }) {
					t.Errorf("pattern %q names no package the module has or links: a rule about nothing", pat)
				}
			}
			var crossings []string
			for _, path := range own {
				if !matchesAny(module, rule.from, path) || matchesAny(module, rule.except, path) {
					continue
				}
				reported := map[string]bool{}
				for _, dep := range pkgs[path].Deps {
					var what string
					switch {
					case rule.onlyStd && !pkgs[dep].Standard:
						what = "outside the standard library"
					case matchesAny(module, rule.forbid, dep):
						what = "forbidden"
					default:
						continue
					}
					// One crossing per forbidden module or package
					// tree, not one per package of pgx.
					key := dep
					if m := pkgs[dep].Module; m != nil && !m.Main {
						key = m.Path
					}
					if reported[key] {
						continue
					}
					reported[key] = true
					chain := importChain(pkgs, path, dep)
					for i := range chain {
						chain[i] = short(chain[i])
					}
					crossings = append(crossings, fmt.Sprintf("%s links %s (%s): %s", short(path), short(dep), what, strings.Join(chain, " → ")))
				}
			}
			switch {
			case rule.pending != "" && len(crossings) == 0:
				t.Errorf("this rule holds now: remove its pending note (%s)", rule.pending)
			case rule.pending != "":
				t.Logf("pending (%s):\n%s", rule.pending, strings.Join(crossings, "\n"))
			case len(crossings) > 0:
				t.Errorf("%d import(s) cross the line (see docs/architecture.md):\n%s", len(crossings), strings.Join(crossings, "\n"))
			}
		})
	}
}

// TestLayersDrawn: every package has a place in the drawing, and none
// imports a layer above its own, save what a pending rule of layerRules
// already names.
func TestLayersDrawn(t *testing.T) {
	module, pkgs := modulePackages(t)
	layerOf := func(path string) int {
		for i, l := range layers {
			if matchesAny(module, l.packages, path) {
				return i
			}
		}
		return -1
	}
	pending := func(from, to string) bool {
		for _, r := range layerRules {
			if r.pending != "" && matchesAny(module, r.from, from) && matchesAny(module, r.forbid, to) {
				return true
			}
		}
		return false
	}
	for path, p := range pkgs {
		if !matches(module, "...", path) || matchesAny(module, beside, path) {
			continue
		}
		from := layerOf(path)
		if from < 0 {
			t.Errorf("%s has no layer: place it in layout_test.go's layers and docs/architecture.md's drawing", short(module, path))
			continue
		}
		for _, imp := range p.Imports {
			if to := layerOf(imp); to > from && !pending(path, imp) {
				t.Errorf("%s (%s) imports %s, a layer above it (%s)", short(module, path), layers[from].name, short(module, imp), layers[to].name)
			}
		}
	}
}

// TestArchitectureNamesEveryPackage: the package table of
// docs/architecture.md names every package of the module, so a new one is
// placed in the drawing when it is added.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9_./]+)`").FindAllStringSubmatch(string(doc), -1) {
		named[m[1]] = true
	}
	module, pkgs := modulePackages(t)
	for path := range pkgs {
		if !matches(module, "...", path) || path == module {
			continue
		}
		if rel := short(module, path); !named[rel] {
			t.Errorf("docs/architecture.md does not name package %s", rel)
		}
	}
}

// endToEndGroups are the prefixes of test/'s files, one per promise
// (docs/testing.md says which checks what).
var endToEndGroups = []string{"sync_", "async_", "store_", "input_", "ops_", "harness_"}

// TestEndToEndFilesGrouped: every file of the end-to-end package belongs
// to a group of docs/testing.md, so the next test lands where a reader
// looks for it.
func TestEndToEndFilesGrouped(t *testing.T) {
	files, err := filepath.Glob("test/*.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Go files in test/")
	}
	for _, f := range files {
		name := filepath.Base(f)
		if name == "main_test.go" {
			continue
		}
		if !slices.ContainsFunc(endToEndGroups, func(g string) bool { return strings.HasPrefix(name, g) }) {
			t.Errorf("test/%s has none of the prefixes %v: name it by the promise it checks (docs/testing.md)", name, endToEndGroups)
		}
	}
}
