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
