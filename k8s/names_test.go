package k8s

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestRender(t *testing.T) {
	for _, v := range variants {
		t.Run(v.dir, func(t *testing.T) {
			t.Parallel()
			m := render(t, v.dir)
			if m.objects == 0 {
				t.Fatal("rendered no objects")
			}
			for _, err := range validateNames(m) {
				t.Error(err)
			}
		})
	}
}

// validateNames applies the API server's name rules the typed structs do
// not: DNS names, label syntax, container and port names.
func validateNames(m *manifests) []error {
	var errs []error
	check := func(what string, problems []string) {
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("%s: %s", what, p))
		}
	}
	checkLabels := func(what string, l map[string]string) {
		for k, v := range l {
			check(what+" label key "+k, validation.IsQualifiedName(k))
			check(what+" label "+k+" value "+v, validation.IsValidLabelValue(v))
		}
	}
	checkPod := func(what string, tmpl *corev1.PodTemplateSpec) {
		checkLabels(what+" pod template", tmpl.Labels)
		for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
			check(what+" container "+c.Name, validation.IsDNS1123Label(c.Name))
			for _, p := range c.Ports {
				if p.Name != "" {
					check(what+" container "+c.Name+" port "+p.Name, validation.IsValidPortName(p.Name))
				}
			}
		}
	}
	for _, o := range allObjects(m) {
		what := o.kind + " " + o.meta.Name
		if o.kind == "Service" {
			check(what, validation.IsDNS1035Label(o.meta.Name))
		} else {
			check(what, validation.IsDNS1123Subdomain(o.meta.Name))
		}
		checkLabels(what, o.meta.Labels)
	}
	for _, d := range m.deployments {
		checkPod("Deployment "+d.Name, &d.Spec.Template)
	}
	for _, s := range m.statefulSets {
		checkPod("StatefulSet "+s.Name, &s.Spec.Template)
	}
	return errs
}

type namedObject struct {
	kind string
	meta *metav1.ObjectMeta
}

func allObjects(m *manifests) []namedObject {
	var out []namedObject
	for _, o := range m.deployments {
		out = append(out, namedObject{"Deployment", &o.ObjectMeta})
	}
	for _, o := range m.statefulSets {
		out = append(out, namedObject{"StatefulSet", &o.ObjectMeta})
	}
	for _, o := range m.services {
		out = append(out, namedObject{"Service", &o.ObjectMeta})
	}
	for _, o := range m.configMaps {
		out = append(out, namedObject{"ConfigMap", &o.ObjectMeta})
	}
	for _, o := range m.secrets {
		out = append(out, namedObject{"Secret", &o.ObjectMeta})
	}
	for _, o := range m.networkPolicies {
		out = append(out, namedObject{"NetworkPolicy", &o.ObjectMeta})
	}
	for _, o := range m.pdbs {
		out = append(out, namedObject{"PodDisruptionBudget", &o.ObjectMeta})
	}
	for _, o := range m.serviceMonitors {
		out = append(out, namedObject{"ServiceMonitor", &o.ObjectMeta})
	}
	return out
}
