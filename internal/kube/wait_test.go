package kube_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/kube"
)

// A StatefulSet is ready once its controller saw the current generation
// and every replica it wants is ready at the current revision; an absent
// spec.replicas means one, as the API server defaults it.
func TestStatefulSetReady(t *testing.T) {
	sts := func(gen, obs int64, replicas any, ready, updated int64) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "StatefulSet",
			"metadata": map[string]any{"name": "kamaji-etcd", "generation": gen},
			"spec":     map[string]any{},
			"status":   map[string]any{"observedGeneration": obs, "readyReplicas": ready, "updatedReplicas": updated},
		}}
		if replicas != nil {
			o.Object["spec"].(map[string]any)["replicas"] = replicas
		}
		return o
	}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		ok   bool
		why  string
	}{
		{"ready", sts(2, 2, int64(1), 1, 1), true, ""},
		{"default one replica", sts(1, 1, nil, 1, 1), true, ""},
		{"old generation", sts(3, 2, int64(1), 1, 1), false, "has not seen generation 3 yet"},
		{"not ready", sts(1, 1, int64(1), 0, 1), false, "0 of 1 replicas ready, 1 updated"},
		{"old revision", sts(1, 1, int64(3), 3, 2), false, "3 of 3 replicas ready, 2 updated"},
	} {
		ok, why := kube.StatefulSetReady().Check(tc.obj)
		if ok != tc.ok || !strings.Contains(why, tc.why) {
			t.Errorf("%s: got %v %q, want %v %q", tc.name, ok, why, tc.ok, tc.why)
		}
	}
}
