package k8s

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the Helm chart, relative to k8s/.
const chartDir = "../charts/webhook-dedup"

// helmHint says how to get helm; `make deps` installs it when missing.
const helmHint = "install it: go install helm.sh/helm/v4/cmd/helm@v4.3.2 (lands in $(go env GOPATH)/bin, which this test also searches), or `make deps`"

// findHelm looks once for helm on PATH, else where `go install` puts it.
var findHelm = sync.OnceValues(func() (string, error) {
	if path, err := exec.LookPath("helm"); err == nil {
		return path, nil
	}
	if path, ok := goInstalled("helm"); ok {
		return path, nil
	}
	return "", fmt.Errorf("the chart's tests need helm, which was not found; %s", helmHint)
})

// runHelm runs helm with args and returns its stdout; a failure is an
// error carrying stderr.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	helm, err := findHelm()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// chartCase is one set of values the chart is installed with: an example
// values file, or the README's quickstart.
type chartCase struct {
	name string
	args []string // after `helm template RELEASE CHART`
	// onboarding: the values named for a roll-out's first days.
	onboarding bool
}

// chartCases lists every example values file and the README's `helm
// install` quickstart, as the flags helm would be given.
func chartCases(t *testing.T) []chartCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example values files in %s/examples (%v)", chartDir, err)
	}
	var cases []chartCase
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		args := []string{"-f", f}
		if name == "onboarding" { // layered over a user's values, as its comment says
			args = []string{"-f", filepath.Join(chartDir, "examples", "redis.yaml"), "-f", f}
		}
		cases = append(cases, chartCase{name: "examples/" + name, args: args, onboarding: name == "onboarding"})
	}
	return append(cases, chartCase{name: "README quickstart", args: readmeHelmInstall(t)})
}

// helmInstall is the README's `helm install RELEASE charts/webhook-dedup
// FLAGS` line; FLAGS hold no quotes, so splitting on spaces is what the
// shell does.
var helmInstall = regexp.MustCompile(`(?m)^helm install (\S+) charts/webhook-dedup((?: [^\n'"\\]+)?)$`)

// readmeHelmInstall returns the flags of the README's quickstart `helm
// install`.
func readmeHelmInstall(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := helmInstall.FindAllSubmatch(readme, -1)
	if len(m) != 1 {
		t.Fatalf("README.md has %d lines `helm install NAME charts/webhook-dedup FLAGS`, want the quickstart's one", len(m))
	}
	return strings.Fields(string(m[0][2]))
}

// userSecrets adds, for each Secret the rendered pods read but the chart
// does not hold, the Secret a user would create: every key read, with a
// value of the right shape (a store URL where one is expected).
func userSecrets(m *manifests) {
	values := map[string]string{
		"REDIS_URL":    "rediss://default:" + unrenderedSecret + "@redis.example.internal:6380/0",
		"DATABASE_URL": "postgres://webhook_dedup:" + unrenderedSecret + "@db.example.internal:5432/webhooks?sslmode=verify-full",
	}
	for _, d := range m.deployments {
		spec := d.Spec.Template.Spec
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				s, ok := m.secrets[ref.Name]
				if !ok {
					s = &corev1.Secret{Data: map[string][]byte{}}
					s.Name = ref.Name
					m.secrets[ref.Name] = s
				}
				v, ok := values[ref.Key]
				if !ok {
					v = unrenderedSecret
				}
				s.Data[ref.Key] = []byte(v)
			}
		}
	}
}

// renderChart renders chart as release RELEASE with args and decodes
// every object strictly, adding the Secrets users create.
func renderChart(t *testing.T, chart string, args ...string) *manifests {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "release", chart, "--namespace", "default"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeStream(strings.NewReader(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	userSecrets(m)
	return m
}

func TestChartLint(t *testing.T) {
	for _, c := range chartCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if out, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, c.args...)...); err != nil {
				t.Error(err)
			} else if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
				t.Errorf("helm lint --strict:\n%s", out)
			}
		})
	}
}

// TestChartInvariants renders the chart with each example values file and
// the README's quickstart, and checks each pod as the kustomize variants
// are checked, running its environment through `webhook-dedup check`.
func TestChartInvariants(t *testing.T) {
	binary := builtBinary(t).binary
	known := binaryVariables(t, binary)
	for _, c := range chartCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := renderChart(t, chartDir, c.args...)
			for _, err := range validateNames(m) {
				t.Error(err)
			}
			if len(m.deployments) != 1 {
				t.Fatalf("%d Deployments, want webhook-dedup's one", len(m.deployments))
			}
			d := m.deployments[0]
			p := newPod(t, m, "Deployment "+d.Name, &d.Spec.Template, known)
			if len(p.apps) > 0 || p.native {
				t.Errorf("%s: the standalone Deployment runs webhook-dedup alone, as an ordinary container", p.name)
			}
			checkPod(t, m, d, p, binary, c.onboarding)
			for _, sm := range m.serviceMonitors {
				checkServiceMonitor(t, m, sm, []*pod{p})
			}
		})
	}
}

// TestChartEmbedded renders a chart that puts the "webhook-dedup.sidecar"
// template in its own pods (testdata/embedding, with this chart as its
// dependency), and checks the pod as the kustomize base is checked.
func TestChartEmbedded(t *testing.T) {
	binary := builtBinary(t).binary
	known := binaryVariables(t, binary)
	chart := filepath.Join(t.TempDir(), "embedding")
	if err := os.CopyFS(chart, os.DirFS("testdata/embedding")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(chart, "charts", "webhook-dedup"), os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	m := renderChart(t, chart)
	if len(m.deployments) != 1 || m.objects != 4 {
		t.Fatalf("%d objects, %d Deployments: want the embedding chart's 4 and nothing of webhook-dedup's own", m.objects, len(m.deployments))
	}
	d := m.deployments[0]
	p := newPod(t, m, "Deployment "+d.Name, &d.Spec.Template, known)
	p.checkPlacement(t, true)
	p.checkAppOnLoopback(t)
	checkPod(t, m, d, p, binary, false)
}

// TestChartRejects: values.schema.json refuses unknown keys and values of
// the wrong shape, and the templates refuse what a schema cannot say,
// each with a message naming what is wrong.
func TestChartRejects(t *testing.T) {
	const url = "upstream:\n  url: http://app:3000\n"
	tests := []struct {
		name, values, want string
	}{
		{"no upstream", "{}", "upstream.url is required"},
		{"unknown top-level key", url + "replicas: 3\n", "replicas"},
		{"unknown nested key", url + "store:\n  type: redis\n  redis:\n    passwrd: x\n", "passwrd"},
		{"misspelt route field", url + "routes:\n  - path: /h\n    sourse: github\n", "sourse"},
		{"unknown store", url + "store:\n  type: mysql\n", "/store/type"},
		{"duration without a unit", url + "  timeout: 30\n", "timeout"},
		{"upstream without a scheme", "upstream:\n  url: app:3000\n", "url"},
		{"the latest tag", url + "image:\n  tag: latest\n", "tag"},
		{"password in the Redis URL", url + "store:\n  type: redis\n  redis:\n    url: redis://:hunter2@redis:6379\n", "url"},
		{"route path without a slash", url + "routes:\n  - path: hooks\n    source: github\n", "path"},
		{"delivery misspelt", url + "delivery: asynch\n", "delivery"},
		{"onStoreError misspelt", url + "onStoreError: fail-open\n", "onStoreError"},
		{"replicas on the memory store", url + "replicaCount: 2\n", "each replica would deduplicate alone"},
		{"replicas on DATA_DIR", url + "replicaCount: 2\nstore:\n  type: dataDir\n", "each replica would deduplicate alone"},
		{"signing route without a Secret", url + "existingSecret: \"\"\n", "GITHUB_WEBHOOK_SECRET"},
		{"async on the memory store", url + "delivery: async\n", "async delivery needs"},
		{"async route on the memory store", url + "routes:\n  - path: /h\n    source: github\n    delivery: async\n", "async delivery needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(file, []byte(tt.values), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := runHelm(t, "template", "release", chartDir, "-f", file)
			if err == nil {
				t.Fatalf("helm template accepted\n%s\nand rendered:\n%s", tt.values, out)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("helm's error does not mention %q:\n%v", tt.want, err)
			}
		})
	}
}

// TestChartVersion: the chart's version and appVersion (the image tag it
// runs by default) are the VERSION file's, the one place a version is
// written; `make release` packages the chart with both set from it.
func TestChartVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(repoRoot(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(file))
	if chart.Version != version || chart.AppVersion != version {
		t.Errorf("Chart.yaml has version %q and appVersion %q; VERSION is %s: set both to it", chart.Version, chart.AppVersion, version)
	}
}
