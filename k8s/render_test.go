// Package k8s holds no code: its tests render every kustomization beside
// them and the Helm chart (../charts), decode each object strictly into its
// Kubernetes API type and check what keeps webhooks from bypassing
// webhook-dedup; they run the Dockerfiles' builds to check the binaries
// the images would ship, and a snapshot of `make release`.
package k8s

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	strictjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// variant is one kustomization that users apply.
type variant struct {
	dir string
	// native says where the sidecar runs: an init container with
	// restartPolicy Always (Kubernetes >= 1.29), or else an ordinary
	// container beside the app.
	native bool
	// onboarding marks the variant for a roll-out's first days, the one
	// allowed to fail open (shadow mode, forward on store errors).
	onboarding bool
}

// variants lists every kustomization under k8s/ that can be built on its
// own; TestEveryKustomizationIsRendered keeps it complete.
var variants = []variant{
	{dir: "base", native: true},
	{dir: "overlays/classic", native: false},
	{dir: "overlays/redis", native: true},
	{dir: "overlays/dynamodb", native: true},
	{dir: "overlays/postgres", native: true},
	{dir: "overlays/existing-app", native: true},
	{dir: "overlays/monitoring", native: true},
	{dir: "overlays/async-disk", native: true},
	{dir: "overlays/onboarding", native: true, onboarding: true},
}

// installHint is how to get a renderer on a machine that has neither.
const installHint = "install one: GOTOOLCHAIN=local go install sigs.k8s.io/kustomize/kustomize/v5@v5.8.2 " +
	"(lands in $(go env GOPATH)/bin, which this test also searches), or kubectl >= 1.27 " +
	"(Debian bookworm's kubernetes-client 1.20 embeds kustomize v2, too old for components)"

// renderer returns the command that renders a kustomization directory given
// as its last argument.
func renderer(t *testing.T) []string {
	t.Helper()
	cmd, err := findRenderer()
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// findRenderer looks once for `kubectl kustomize`, used if kubectl embeds
// kustomize v5, else for `kustomize build` on PATH or where `go install`
// puts it.
var findRenderer = sync.OnceValues(func() ([]string, error) {
	oldKubectl := ""
	if path, err := exec.LookPath("kubectl"); err == nil {
		out, _ := exec.Command(path, "version", "--client").CombinedOutput()
		if strings.Contains(string(out), "Kustomize Version: v5") {
			return []string{path, "kustomize"}, nil
		}
		oldKubectl = fmt.Sprintf(" (%s embeds no kustomize v5: %q)", path, strings.TrimSpace(string(out)))
	}
	if path, err := exec.LookPath("kustomize"); err == nil {
		return []string{path, "build"}, nil
	}
	if path, ok := goInstalled("kustomize"); ok {
		return []string{path, "build"}, nil
	}
	return nil, fmt.Errorf("rendering kustomizations needs kubectl with kustomize v5 or kustomize, and neither was found%s; %s", oldKubectl, installHint)
})

// goInstalled looks for a command where `go install` puts it (GOBIN, else
// each GOPATH's bin), which need not be on PATH.
func goInstalled(name string) (string, bool) {
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return "", false
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n") // GOBIN's line may be empty
	if len(lines) != 2 {
		return "", false
	}
	dirs := []string{lines[0]}
	for _, p := range filepath.SplitList(lines[1]) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	for _, dir := range dirs {
		path := filepath.Join(dir, name)
		if dir != "" && isExecutable(path) {
			return path, true
		}
	}
	return "", false
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0
}

// render builds the kustomization in dir (relative to k8s/) and decodes
// every object it yields strictly.
func render(t *testing.T, dir string) *manifests {
	t.Helper()
	cmd := renderer(t)
	var stdout, stderr bytes.Buffer
	c := exec.Command(cmd[0], append(cmd[1:], dir)...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", strings.Join(cmd, " "), dir, err, stderr.String())
	}
	m, err := decodeStream(&stdout)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return m
}

// manifests holds one rendered kustomization, each object in the typed
// struct the API server would decode it into.
type manifests struct {
	deployments     []*appsv1.Deployment
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	networkPolicies []*networkingv1.NetworkPolicy
	pdbs            []*policyv1.PodDisruptionBudget
	pvcs            map[string]*corev1.PersistentVolumeClaim
	serviceMonitors []*serviceMonitor
	serviceAccounts map[string]*corev1.ServiceAccount
	// objects counts every decoded object.
	objects int
}

// decodeStream splits a multi-document YAML stream and decodes each
// document strictly: an unknown or duplicate field, a key in the wrong case
// or a kind this project does not ship is an error.
func decodeStream(r io.Reader) (*manifests, error) {
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		pvcs: map[string]*corev1.PersistentVolumeClaim{}, serviceAccounts: map[string]*corev1.ServiceAccount{}}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split YAML stream: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if err := m.add(doc); err != nil {
			return nil, err
		}
	}
}

func (m *manifests) add(doc []byte) error {
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return fmt.Errorf("YAML to JSON: %w\n%s", err, doc)
	}
	var meta struct {
		metav1.TypeMeta
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return fmt.Errorf("read apiVersion and kind: %w", err)
	}
	var obj any
	switch meta.APIVersion + " " + meta.Kind {
	case "apps/v1 Deployment":
		o := &appsv1.Deployment{}
		m.deployments, obj = append(m.deployments, o), o
	case "apps/v1 StatefulSet":
		o := &appsv1.StatefulSet{}
		m.statefulSets, obj = append(m.statefulSets, o), o
	case "v1 Service":
		o := &corev1.Service{}
		m.services, obj = append(m.services, o), o
	case "v1 ConfigMap":
		o := &corev1.ConfigMap{}
		m.configMaps[meta.Metadata.Name], obj = o, o
	case "v1 Secret":
		o := &corev1.Secret{}
		m.secrets[meta.Metadata.Name], obj = o, o
	case "v1 PersistentVolumeClaim":
		o := &corev1.PersistentVolumeClaim{}
		m.pvcs[meta.Metadata.Name], obj = o, o
	case "v1 ServiceAccount":
		o := &corev1.ServiceAccount{}
		m.serviceAccounts[meta.Metadata.Name], obj = o, o
	case "networking.k8s.io/v1 NetworkPolicy":
		o := &networkingv1.NetworkPolicy{}
		m.networkPolicies, obj = append(m.networkPolicies, o), o
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		m.pdbs, obj = append(m.pdbs, o), o
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o := &serviceMonitor{}
		m.serviceMonitors, obj = append(m.serviceMonitors, o), o
	default:
		return fmt.Errorf("%s %q: a kind this test does not know; add its typed struct to manifests", meta.APIVersion+" "+meta.Kind, meta.Metadata.Name)
	}
	if err := decodeStrict(data, obj); err != nil {
		return fmt.Errorf("%s %q: %w", meta.Kind, meta.Metadata.Name, err)
	}
	m.objects++
	return nil
}

// decodeStrict decodes JSON the way the API server's strict field
// validation does: case-sensitive keys, unknown and duplicate fields fail.
func decodeStrict(data []byte, into any) error {
	strictErrs, err := strictjson.UnmarshalStrict(data, into, strictjson.DisallowUnknownFields, strictjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) that this project writes. It is a local struct
// rather than the operator's Go module, which would pull a second
// Kubernetes client into go.mod for one type, and rather than unstructured
// maps checked against a list of allowed keys, which would re-implement
// decoding by hand and type nothing. Decoded strictly, a misspelt or
// misplaced field fails just as it does for the built-in kinds; a field the
// operator knows but this struct does not also fails, and is added here when
// the manifests start to use it.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []serviceMonitorEndpoint `json:"endpoints"`
	} `json:"spec"`
}

type serviceMonitorEndpoint struct {
	Port          string `json:"port"`
	Path          string `json:"path,omitempty"`
	Scheme        string `json:"scheme,omitempty"`
	Interval      string `json:"interval,omitempty"`
	ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
}

func TestEveryKustomizationIsRendered(t *testing.T) {
	listed := map[string]bool{}
	for _, v := range variants {
		listed[v.dir] = true
	}
	usedComponents := map[string]bool{}
	// Kustomizations that render transformer configurations (../image)
	// for others to list under transformers: checked through those.
	usedTransformers := map[string]bool{}
	var components, kustomizations []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		var k struct {
			Kind         string   `json:"kind"`
			Components   []string `json:"components"`
			Transformers []string `json:"transformers"`
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if k.Kind == "Component" {
			components = append(components, dir)
			return nil
		}
		kustomizations = append(kustomizations, dir)
		for _, c := range k.Components {
			usedComponents[filepath.ToSlash(filepath.Join(dir, c))] = true
		}
		if listed[dir] {
			for _, tr := range k.Transformers {
				usedTransformers[filepath.ToSlash(filepath.Join(dir, tr))] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range kustomizations {
		if !listed[dir] && !usedTransformers[dir] {
			t.Errorf("%s is a kustomization missing from variants: add it so it is rendered and checked", dir)
		}
	}
	sort.Strings(components)
	for _, c := range components {
		if !usedComponents[c] {
			t.Errorf("component %s is used by no rendered kustomization, so nothing checks it", c)
		}
	}
	for _, v := range variants {
		if _, err := os.Stat(filepath.Join(v.dir, "kustomization.yaml")); err != nil {
			t.Errorf("variant %s: %v", v.dir, err)
		}
	}
}

// The strict decoder is what makes the render tests mean something: prove
// it rejects what the API server's strict field validation rejects.
func TestDecodeStreamIsStrict(t *testing.T) {
	const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  selector:
    matchLabels: {app: a}
  template:
    metadata:
      labels: {app: a}
    spec:
      containers:
        - name: app
          image: example.com/app:1
`
	const monitor = `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: m
spec:
  selector:
    matchLabels: {app: a}
  endpoints:
    - port: metrics
`
	tests := []struct {
		name    string
		stream  string
		wantErr string // empty: must decode
	}{
		{"valid deployment", deployment, ""},
		{"valid service monitor", monitor, ""},
		{"two documents", deployment + "---\n" + monitor, ""},
		{"unknown field", deployment + "          imagePullPolicyy: Always\n", `unknown field "spec.template.spec.containers[0].imagePullPolicyy"`},
		{"key in the wrong case", deployment + "          ImagePullPolicy: Always\n", "ImagePullPolicy"},
		{"duplicate key", deployment + "          image: example.com/app:2\n", "image"},
		{"wrong type", strings.Replace(deployment, "name: app\n          image", "name: app\n          tty: sometimes\n          image", 1), "tty"},
		{"unknown field in a ServiceMonitor", monitor + "      intervall: 30s\n", "intervall"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n", "does not know"},
		{"port not a number", "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n    - port: eighty\n", "port"},
		{"bad quantity", deployment + "          resources:\n            limits:\n              memory: lots\n", "quantities must match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := decodeStream(strings.NewReader(tt.stream))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if m.objects != strings.Count(tt.stream, "\nkind: ") {
					t.Errorf("decoded %d objects, want %d", m.objects, strings.Count(tt.stream, "\nkind: "))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("decode error = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}
