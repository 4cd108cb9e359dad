package kubefake

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/kube"
)

var mdGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"}

func md(ann map[string]string, replicas any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{}}
	o.SetGroupVersionKind(mdGVK)
	o.SetNamespace("ns")
	o.SetName("lab1-workers")
	o.SetAnnotations(ann)
	if replicas != nil {
		o.Object["spec"] = map[string]any{"replicas": replicas}
	}
	return o
}

// Apply merges a patch's maps into the stored object as server-side apply
// does for the fields it names, and says what it changed.
func TestApplyMergesAndSaysWhatChanged(t *testing.T) {
	c := New(md(map[string]string{"keep": "1", "min": "0"}, int64(2)))
	ctx := t.Context()
	ch, err := c.Apply(ctx, []*unstructured.Unstructured{md(map[string]string{"min": "1"}, nil)}, kube.ApplyOptions{FieldManager: "labctl-scale"})
	if err != nil || len(ch) != 1 || ch[0].Action != kube.Update {
		t.Fatalf("apply: %v %v", ch, err)
	}
	got, found, _ := c.Get(ctx, kube.RefOf(md(nil, nil)))
	if !found || got.GetAnnotations()["keep"] != "1" || got.GetAnnotations()["min"] != "1" {
		t.Errorf("annotations after the patch: %v", got.GetAnnotations())
	}
	if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); r != 2 {
		t.Errorf("spec.replicas %d: a patch without it must keep it", r)
	}
	ch, _ = c.Apply(ctx, []*unstructured.Unstructured{md(map[string]string{"min": "1"}, nil)}, kube.ApplyOptions{})
	if len(ch) != 1 || ch[0].Action != kube.Unchanged {
		t.Errorf("the same patch again: %v, want unchanged", ch)
	}
	if len(c.Applied) != 2 || c.Applied[0].FieldManager != "labctl-scale" {
		t.Errorf("applied calls: %+v", c.Applied)
	}
	if _, err := c.List(ctx, schema.GroupVersionKind{Group: "x", Version: "v1", Kind: "Nope"}, "", ""); err == nil {
		t.Error("listing a kind the fake does not serve succeeded")
	}
}
