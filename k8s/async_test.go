package k8s

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// checkDelivery: async delivery runs on a durable store (DATA_DIR, Redis
// or PostgreSQL), and the embedded
// store on disk (DATA_DIR) runs as it must: one replica, replaced by
// stopping it first (Recreate: the file's lock and a ReadWriteOnce volume
// admit one pod), its directory on a PersistentVolumeClaim that is
// rendered, so that an accepted event outlives the pod.
func checkDelivery(t *testing.T, m *manifests, d *appsv1.Deployment, p *pod) {
	t.Helper()
	async := p.setting("DELIVERY") == "async" || strings.Contains(p.setting("ROUTES"), ";async")
	dataDir := p.setting("DATA_DIR")
	redis := p.setting("REDIS_URL") != "" || p.setting("REDIS_CLUSTER_ADDRS") != "" || p.setting("REDIS_SENTINEL_ADDRS") != ""
	postgres := p.setting("DATABASE_URL") != "" || slices.Contains(p.names, "DATABASE_URL")
	if async && dataDir == "" && !redis && !postgres && !slices.Contains(p.names, "REDIS_URL") {
		t.Errorf("%s: async delivery without DATA_DIR, Redis or PostgreSQL: the sidecar refuses to start", p.name)
	}
	if dataDir == "" {
		return
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("%s: DATA_DIR with %v replicas, want 1: each pod would keep its own records and queue", p.name, d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("%s: DATA_DIR with strategy %q, want Recreate: a new pod cannot open the file while the old one holds it", p.name, d.Spec.Strategy.Type)
	}
	var claim string
	for _, vm := range p.sidecar.VolumeMounts {
		if vm.MountPath != dataDir && !strings.HasPrefix(dataDir, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		if vm.ReadOnly {
			t.Errorf("%s: DATA_DIR %s is mounted read-only", p.name, dataDir)
		}
		for _, v := range p.spec.Volumes {
			if v.Name == vm.Name && v.PersistentVolumeClaim != nil {
				claim = v.PersistentVolumeClaim.ClaimName
			}
		}
	}
	if claim == "" {
		t.Fatalf("%s: DATA_DIR %s is not on a PersistentVolumeClaim mounted in the sidecar: the queue would die with the pod", p.name, dataDir)
	}
	pvc, ok := m.pvcs[claim]
	if !ok {
		t.Fatalf("%s: PersistentVolumeClaim %s is not rendered", p.name, claim)
	}
	if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOnce) && !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOncePod) {
		t.Errorf("%s: PersistentVolumeClaim %s access modes %v, want ReadWriteOnce (one pod writes the file)", p.name, claim, pvc.Spec.AccessModes)
	}
	if _, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		t.Errorf("%s: PersistentVolumeClaim %s requests no storage", p.name, claim)
	}
	if psc := p.spec.SecurityContext; psc == nil || psc.FSGroup == nil {
		t.Errorf("%s: no fsGroup: the sidecar's non-root user may not be able to write DATA_DIR", p.name)
	}
}
