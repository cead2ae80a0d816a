package k8s

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// variableLine is a line of `webhook-dedup -h` that documents a variable:
// its name, then its default ("(empty)" for none), then what it means.
var variableLine = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)\s+(\S+)`)

// binaryVariables runs `webhook-dedup -h` and returns every environment
// variable it lists, with its default.
func binaryVariables(t *testing.T, binary string) map[string]string {
	t.Helper()
	out := usage(t, binary)
	vars := parseUsage(out)
	for _, name := range []string{"UPSTREAM_URL", "LISTEN_ADDR", "ADMIN_ADDR", "SHUTDOWN_DELAY", "SHUTDOWN_TIMEOUT", "REDIS_URL"} {
		if _, ok := vars[name]; !ok {
			t.Fatalf("webhook-dedup -h does not list %s, which these tests rely on:\n%s", name, out)
		}
	}
	return vars
}

// usage is what `webhook-dedup -h` prints.
func usage(t *testing.T, binary string) string {
	t.Helper()
	out, err := exec.Command(binary, "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("webhook-dedup -h: %v\n%s", err, out)
	}
	return string(out)
}

// signingLine is a line of `webhook-dedup -h` that documents a preset's
// signing secret: the variable, then the preset it verifies.
var signingLine = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)\s+\S+\s+([a-z0-9]+) signing secrets`)

// signingSecrets maps each preset that signs to its secret's variable, as
// `webhook-dedup -h` lists them.
func signingSecrets(t *testing.T, binary string) map[string]string {
	t.Helper()
	out := usage(t, binary)
	secrets := parseSigning(out)
	if secrets["stripe"] != "STRIPE_WEBHOOK_SECRET" {
		t.Fatalf("webhook-dedup -h does not list stripe's signing secret, which these tests rely on:\n%s", out)
	}
	return secrets
}

func parseSigning(usage string) map[string]string {
	secrets := map[string]string{}
	for _, line := range strings.Split(usage, "\n") {
		if m := signingLine.FindStringSubmatch(line); m != nil {
			secrets[m[2]] = m[1]
		}
	}
	return secrets
}

func parseUsage(usage string) map[string]string {
	vars := map[string]string{}
	for _, line := range strings.Split(usage, "\n") {
		if m := variableLine.FindStringSubmatch(line); m != nil {
			def := m[2]
			if def == "(empty)" {
				def = ""
			}
			vars[m[1]] = def
		}
	}
	return vars
}

func TestParseUsage(t *testing.T) {
	const usage = `webhook-dedup: forward each webhook event to the app once.
Usage: webhook-dedup [serve | healthcheck | version]
Configured by environment variables:

UPSTREAM_URL           (empty)           the app, e.g. http://127.0.0.1:3000 (required)
LISTEN_ADDR            :8080             where webhooks arrive
KEY_PREFIX             webhook-dedup:    prefix of every store key
STRIPE_WEBHOOK_SECRET  (empty)           stripe signing secrets
`
	if got := parseSigning(usage); len(got) != 1 || got["stripe"] != "STRIPE_WEBHOOK_SECRET" {
		t.Errorf("signing secrets %v, want stripe's alone", got)
	}
	got := parseUsage(usage)
	want := map[string]string{"UPSTREAM_URL": "", "LISTEN_ADDR": ":8080", "KEY_PREFIX": "webhook-dedup:", "STRIPE_WEBHOOK_SECRET": ""}
	if len(got) != len(want) {
		t.Errorf("parsed %d variables %v, want %d", len(got), got, len(want))
	}
	for name, def := range want {
		if v, ok := got[name]; !ok || v != def {
			t.Errorf("%s = %q (listed %v), want %q", name, v, ok, def)
		}
	}
}
