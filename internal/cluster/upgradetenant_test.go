package cluster

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A tenant's control plane is at the target only when the
// KamajiControlPlane asks for it, Kamaji reports running it, and every
// replica is ready: asking alone (the topology controller's first write)
// is not enough.
func TestKamajiControlPlaneAtTheTarget(t *testing.T) {
	kcp := func(spec, status string, replicas, ready int64, isReady bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"spec":   map[string]any{"version": spec, "replicas": replicas},
			"status": map[string]any{"version": status, "readyReplicas": ready, "ready": isReady},
		}}
		u.SetName("tenant1-abcde")
		return u
	}
	for _, c := range []struct {
		name string
		obj  *unstructured.Unstructured
		done bool
		says string
	}{
		{"asked, not running yet", kcp("v1.35.4", "v1.35.3", 2, 2, true), false, "asks for v1.35.4, runs v1.35.3, 2/2 ready"},
		{"running, a replica not ready", kcp("v1.35.4", "v1.35.4", 2, 1, true), false, "1/2 ready"},
		{"not ready", kcp("v1.35.4", "v1.35.4", 2, 2, false), false, "2/2 ready"},
		{"at the target", kcp("v1.35.4", "v1.35.4", 2, 2, true), true, ""},
		{"not asked yet", kcp("v1.35.3", "v1.35.3", 2, 2, true), false, "asks for v1.35.3"},
	} {
		done, says := kamajiAt(c.obj, "v1.35.4")
		if done != c.done || !strings.Contains(says, c.says) {
			t.Errorf("%s: done %v, %q; want %v, saying %q", c.name, done, says, c.done, c.says)
		}
	}
}

// CAPMOX's HasFailed, as labctl reads it: only VirtualMachineProvisioned
// False with reason VMProvisionFailed means CAPMOX will not try again.
func TestCAPMOXGaveUp(t *testing.T) {
	pm := func(status, reason string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Ready", "status": "False", "reason": "VMProvisionFailed"},
			map[string]any{"type": "VirtualMachineProvisioned", "status": status, "reason": reason, "message": "VM template not found"},
		}}}}
	}
	if why, ok := capmoxGaveUp(pm("False", "VMProvisionFailed")); !ok || why != "VM template not found" {
		t.Errorf("a failed provisioning: %q, %v", why, ok)
	}
	for _, c := range [][2]string{{"False", "WaitingForCloudInit"}, {"True", "VMProvisionFailed"}} {
		if _, ok := capmoxGaveUp(pm(c[0], c[1])); ok {
			t.Errorf("condition %s/%s read as given up", c[0], c[1])
		}
	}
}
