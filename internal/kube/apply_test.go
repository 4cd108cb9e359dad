package kube_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// The CR comes before its CRD on purpose: Apply must reorder.
const widgets = `
apiVersion: example.labctl.dev/v1
kind: Widget
metadata:
  name: w1
  namespace: apply-test
spec:
  size: 3
  colour: blue
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: apply-test
data:
  a: "1"
  b: "2"
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.labctl.dev
spec:
  group: example.labctl.dev
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
                colour: {type: string}
---
apiVersion: v1
kind: Namespace
metadata:
  name: apply-test
`

// writes counts the requests that change state, from every client built
// from c.
func countWrites(c *kube.Client) *atomic.Int64 {
	var n atomic.Int64
	c.WrapTransport(testbed.CountWrites(&n))
	return &n
}

func parse(t *testing.T, s string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kube.ParseObjects("test", []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func actions(cs []kube.Change) map[string]kube.Action {
	m := map[string]kube.Action{}
	for _, c := range cs {
		m[c.Ref.String()] = c.Action
	}
	return m
}

func TestApplyOrdersCRDsFirstAndRerunWritesNothing(t *testing.T) {
	env := testbed.Start(t)
	c := kube.NewForConfig(env.Config, env.Kubeconfig)
	writes := countWrites(c)

	plan, err := c.Plan(ctx(t), parse(t, widgets))
	if err != nil {
		t.Fatal(err)
	}
	if plan[0].Action != kube.Create || plan[0].Why != "its CRD is not installed yet" {
		t.Errorf("plan for a Widget before its CRD = %v", plan[0])
	}
	if writes.Load() != 0 {
		t.Fatalf("Plan wrote %d times", writes.Load())
	}

	got, err := c.Apply(ctx(t), parse(t, widgets), kube.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	order := []string{}
	for _, ch := range got {
		order = append(order, ch.Ref.GVK.Kind)
		if ch.Action != kube.Create {
			t.Errorf("%s: %s, want create", ch.Ref, ch.Action)
		}
	}
	if strings.Join(order, ",") != "Namespace,CustomResourceDefinition,Widget,ConfigMap" {
		t.Errorf("applied in order %v, want the namespace, then the CRD, then the rest in input order", order)
	}
	live, found, err := c.Get(ctx(t), kube.RefOf(parse(t, widgets)[0]))
	if err != nil || !found {
		t.Fatalf("widget after apply: found %v, %v", found, err)
	}
	if mf := live.GetManagedFields(); len(mf) != 1 || mf[0].Manager != "labctl" || mf[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Errorf("managed fields = %+v, want one Apply entry by labctl", mf)
	}

	before := writes.Load()
	again, err := c.Apply(ctx(t), parse(t, widgets), kube.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := writes.Load() - before; n != 0 || len(kube.Changed(again)) != 0 {
		t.Errorf("re-apply made %d writes and changes %v; want none", n, kube.Changed(again))
	}
}

func TestApplyUpdatesDriftAndRemovesDroppedFields(t *testing.T) {
	env := testbed.Start(t)
	c := kube.NewForConfig(env.Config, env.Kubeconfig)
	if _, err := c.Apply(ctx(t), parse(t, widgets), kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	dc := dynamic.NewForConfigOrDie(env.Config)

	// Someone else changes a value labctl set: the next apply puts it back.
	live, err := dc.Resource(cm).Namespace("apply-test").Get(ctx(t), "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(live.Object, "changed by hand", "data", "a")
	if _, err := dc.Resource(cm).Namespace("apply-test").Update(ctx(t), live, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Apply(ctx(t), parse(t, widgets), kube.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(got)["ConfigMap apply-test/settings"]; a != kube.Update {
		t.Errorf("drifted ConfigMap: %s, want update", a)
	}
	live, _ = dc.Resource(cm).Namespace("apply-test").Get(ctx(t), "settings", metav1.GetOptions{})
	if v, _, _ := unstructured.NestedString(live.Object, "data", "a"); v != "1" {
		t.Errorf("data.a = %q after re-apply, want 1", v)
	}

	// labctl stops setting data.b: the field goes, though what remains is
	// still a subset of the live object.
	fewer := strings.Replace(widgets, "  b: \"2\"\n", "", 1)
	got, err = c.Apply(ctx(t), parse(t, fewer), kube.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(got)["ConfigMap apply-test/settings"]; a != kube.Update {
		t.Errorf("ConfigMap without data.b: %s, want update", a)
	}
	live, _ = dc.Resource(cm).Namespace("apply-test").Get(ctx(t), "settings", metav1.GetOptions{})
	if _, found, _ := unstructured.NestedString(live.Object, "data", "b"); found {
		t.Errorf("data.b is still there after labctl stopped setting it: %v", live.Object["data"])
	}
}

func TestApplyValidatesStrictly(t *testing.T) {
	env := testbed.Start(t)
	c := kube.NewForConfig(env.Config, env.Kubeconfig)
	bad := strings.Replace(widgets, "colour: blue", "colour: blue\n  flavour: mint", 1)
	_, err := c.Apply(ctx(t), parse(t, bad), kube.ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "Widget apply-test/w1") || !strings.Contains(err.Error(), "flavour") {
		t.Errorf("an unknown field was not refused with the object and field named: %v", err)
	}
}

const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.k8s.io/pause:3.10}]
`

// setAvailable plays the deployment controller, which the test bed does
// not run: it marks the Deployment Available after delay.
func setAvailable(t *testing.T, env *testbed.Env, ns, name string, delay time.Duration) {
	t.Helper()
	dc := dynamic.NewForConfigOrDie(env.Config)
	ri := dc.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns)
	go func() {
		time.Sleep(delay)
		d, err := ri.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("stand-in deployment controller: %v", err)
			return
		}
		_ = unstructured.SetNestedField(d.Object, d.GetGeneration(), "status", "observedGeneration")
		_ = unstructured.SetNestedSlice(d.Object, []any{map[string]any{
			"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "lastUpdateTime": time.Now().UTC().Format(time.RFC3339),
		}}, "status", "conditions")
		if _, err := ri.UpdateStatus(context.Background(), d, metav1.UpdateOptions{}); err != nil {
			t.Errorf("stand-in deployment controller: %v", err)
		}
	}()
}

func TestWaitForAvailableAndTimeout(t *testing.T) {
	env := testbed.Start(t)
	c := kube.NewForConfig(env.Config, env.Kubeconfig)
	if _, err := c.Apply(ctx(t), parse(t, deployment), kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("timeout names object and condition", func(t *testing.T) {
		began := time.Now()
		err := c.WaitFor(ctx(t), kube.DeploymentGVK, "default", []string{"web"}, kube.DeploymentAvailable(), time.Second)
		var te *kube.TimeoutError
		if !errors.As(err, &te) {
			t.Fatalf("err = %v, want a TimeoutError", err)
		}
		want := "timed out after 1s waiting for Deployment default/web to be Available (last seen: the deployment controller has not seen generation 1 yet"
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("err = %q\nwant prefix %q", err, want)
		}
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("a 1s wait took %s", d)
		}
	})

	t.Run("missing object", func(t *testing.T) {
		err := c.WaitFor(ctx(t), kube.DeploymentGVK, "default", []string{"web", "api"}, kube.DeploymentAvailable(), 500*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "waiting for Deployment default/web to be Available") {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("proceeds when available", func(t *testing.T) {
		setAvailable(t, env, "default", "web", 300*time.Millisecond)
		var seen []string
		pctx := kube.WithProgress(ctx(t), func(s string) { seen = append(seen, s) })
		began := time.Now()
		if err := c.WaitFor(pctx, kube.DeploymentGVK, "default", []string{"web"}, kube.DeploymentAvailable(), 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(began); d < 250*time.Millisecond {
			t.Errorf("returned after %s, before the deployment was available", d)
		}
		if len(seen) == 0 || !strings.HasPrefix(seen[0], "waiting for Deployment default/web to be Available") {
			t.Errorf("progress = %q", seen)
		}
	})

	t.Run("interrupt is not a timeout", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx(t))
		time.AfterFunc(200*time.Millisecond, cancel)
		err := c.WaitFor(cctx, kube.DeploymentGVK, "default", []string{"nope"}, kube.DeploymentAvailable(), time.Minute)
		var te *kube.TimeoutError
		if errors.As(err, &te) || !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
}
