package cluster

// The few Kubernetes operations the cluster commands need: server-side
// apply with field manager labctl, a read-only plan, and watch-based waits.
// The management-stack branch (issue 3) brings the shared versions of
// these to internal/kube; once it lands, this file gives way to them.

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/step"
)

// FieldManager owns every field labctl applies.
const FieldManager = "labctl"

type kubeOps struct {
	c client.Client // strict field validation: an unknown field is an error
	w client.WithWatch
}

func newKubeOps(c client.WithWatch) *kubeOps {
	return &kubeOps{c: client.WithFieldValidation(c, metav1.FieldValidationStrict), w: c}
}

func ref(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// plan says what apply would change, reading only: "create X" or
// "update X". An object whose live state already holds every field labctl
// sets is up to date.
func (k *kubeOps) plan(ctx context.Context, objs []*unstructured.Unstructured) ([]string, error) {
	var out []string
	for _, o := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		err := k.c.Get(ctx, client.ObjectKeyFromObject(o), live)
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, "create "+ref(o))
		case err != nil:
			return out, fmt.Errorf("reading %s: %w", ref(o), err)
		case !subset(live.Object, o.Object):
			out = append(out, "update "+ref(o))

		}
	}
	return out, nil
}

// apply server-side applies the objects that differ from the server.
func (k *kubeOps) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		if err := k.c.Get(ctx, client.ObjectKeyFromObject(o), live); err == nil && subset(live.Object, o.Object) {
			continue // nothing to write
		}
		step.Progress(ctx, "applying %s", ref(o))
		err := k.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(FieldManager), client.ForceOwnership)
		if err != nil {
			return fmt.Errorf("applying %s: %w", ref(o), err)
		}
	}
	return nil
}

// subset reports whether live holds every value of want.
func subset(live, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return len(w) == 0 && live == nil
		}
		for key, wv := range w {
			if !subset(l[key], wv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			return false
		}
		for i := range w {
			if !subset(l[i], w[i]) {
				return false
			}
		}
		return true
	case int64:
		return number(live) == float64(w)
	case float64: // YAML decoded through JSON
		return number(live) == w
	}
	return reflect.DeepEqual(live, want)
}

// until watches the objects of one kind in namespace (narrowed to name when
// set) until done says they are as wanted. It lists once, then watches.
func (k *kubeOps) until(ctx context.Context, gvk schema.GroupVersionKind, namespace, name, what string, timeout time.Duration,
	done func(objs map[string]*unstructured.Unstructured) (bool, string)) error {
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	opts := func(o *metav1.ListOptions) []client.ListOption {
		lo := []client.ListOption{client.InNamespace(namespace), &client.ListOptions{Raw: o}}
		if name != "" {
			lo = append(lo, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
		}
		return lo
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(listGVK)
			err := k.c.List(ctx, l, opts(&o)...)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(listGVK)
			return k.w.Watch(ctx, l, opts(&o)...)
		},
	}
	seen := map[string]*unstructured.Unstructured{}
	last := "nothing seen yet"
	eval := func() bool {
		ok, now := done(seen)
		if now != "" {
			last = now
		}
		if !ok {
			step.Progress(ctx, "%s: %s", what, last)
		}
		return ok
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := watchtools.UntilWithSync(wctx, lw, &unstructured.Unstructured{},
		func(store cache.Store) (bool, error) {
			for _, o := range store.List() {
				u := o.(*unstructured.Unstructured)
				seen[u.GetName()] = u
			}
			return eval(), nil
		},
		func(ev watch.Event) (bool, error) {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				return false, nil
			}
			if ev.Type == watch.Deleted {
				delete(seen, u.GetName())
			} else {
				seen[u.GetName()] = u
			}
			return eval(), nil
		})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	case wctx.Err() != nil:
		return fmt.Errorf("timed out after %s waiting for %s (last seen: %s)", timeout, what, last)
	}
	return fmt.Errorf("waiting for %s: %w", what, err)
}

// number is a JSON number as float64; NaN for anything else.
func number(v any) float64 {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return math.NaN()
}
