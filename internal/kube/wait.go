package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Condition is what a wait waits for on each object.
type Condition struct {
	// Name is the condition for people: "Available", "Established",
	// "Ready at v1.12.11".
	Name string
	// Check says whether obj meets the condition and, when not, what it
	// shows now ("Available=False (MinimumReplicasUnavailable): ...").
	Check func(obj *unstructured.Unstructured) (ok bool, now string)
}

// TimeoutError is a wait that ran out of time. It names the object and
// the condition, and what the object showed last.
type TimeoutError struct {
	What      string // e.g. "Deployment cert-manager/cert-manager-webhook"
	Condition string
	Timeout   time.Duration
	Last      string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("timed out after %s waiting for %s to be %s (last seen: %s)", e.Timeout, e.What, e.Condition, e.Last)
}

// Watch is a set of objects of one kind a wait looks at: one namespace (or
// all, or cluster-scoped), optionally narrowed by labels or one name.
type Watch struct {
	GVK           schema.GroupVersionKind
	Namespace     string
	LabelSelector string
	Name          string
}

// Until watches w until done says the objects it sees are as wanted, or
// timeout passes. done gets every object seen so far, by name; what names
// the objects and condition in the timeout error and, with now, in
// progress reports. Until never polls: it reads once, and when that is not
// yet it, watches.
func (c *Client) Until(ctx context.Context, w Watch, what, condition string, timeout time.Duration, done func(objs map[string]*unstructured.Unstructured) (ok bool, now string)) error {
	ri, served, err := c.resource(w.GVK, w.Namespace)
	if err != nil {
		return err
	}
	if !served {
		return fmt.Errorf("waiting for %s: the server does not serve %s", what, w.GVK)
	}
	opts := func(o *metav1.ListOptions) {
		o.LabelSelector = w.LabelSelector
		if w.Name != "" {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.Name).String()
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			opts(&o)
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			opts(&o)
			return ri.Watch(ctx, o)
		},
	}

	// One read first: most waits on a cluster that is already as wanted
	// end here, without the watch's start-up cost.
	var first metav1.ListOptions
	opts(&first)
	l, err := ri.List(ctx, first)
	if err != nil {
		return fmt.Errorf("waiting for %s to be %s: %w", what, condition, err)
	}
	seen := map[string]*unstructured.Unstructured{}
	for i := range l.Items {
		seen[l.Items[i].GetName()] = &l.Items[i]
	}
	if ok, _ := done(seen); ok {
		return nil
	}
	clear(seen)

	var mu sync.Mutex
	last := "nothing seen yet"
	eval := func() bool {
		ok, now := done(seen)
		if now != "" {
			last = now
		}
		if p := progress(ctx); p != nil && !ok {
			p(fmt.Sprintf("waiting for %s to be %s: %s", what, condition, last))
		}
		return ok
	}

	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = watchtools.UntilWithSync(wctx, lw, &unstructured.Unstructured{},
		func(store cache.Store) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
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
			mu.Lock()
			defer mu.Unlock()
			if ev.Type == watch.Deleted {
				delete(seen, u.GetName())
			} else {
				seen[u.GetName()] = u
			}
			return eval(), nil
		})
	if err == nil {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	switch {
	case ctx.Err() != nil: // the caller's context ended: interrupted
		return fmt.Errorf("waiting for %s to be %s: %w", what, condition, ctx.Err())
	case wctx.Err() != nil:
		return &TimeoutError{What: what, Condition: condition, Timeout: timeout, Last: last}
	}
	return fmt.Errorf("waiting for %s to be %s: %w", what, condition, err)
}

// WaitFor waits until every named object of kind gvk in namespace meets
// cond. The error names the first object that does not.
func (c *Client) WaitFor(ctx context.Context, gvk schema.GroupVersionKind, namespace string, names []string, cond Condition, timeout time.Duration) error {
	if len(names) == 0 {
		return nil
	}
	w := Watch{GVK: gvk, Namespace: namespace}
	if len(names) == 1 {
		w.Name = names[0]
	}
	refs := make([]string, len(names))
	for i, n := range names {
		refs[i] = Ref{GVK: gvk, Namespace: namespace, Name: n}.String()
	}
	what := refs[0]
	if len(names) > 1 {
		what = fmt.Sprintf("%d %ss", len(names), gvk.Kind)
		if namespace != "" {
			what += " in " + namespace
		}
	}
	pending := refs[0]
	err := c.Until(ctx, w, what, cond.Name, timeout, func(objs map[string]*unstructured.Unstructured) (bool, string) {
		for i, n := range names {
			o, ok := objs[n]
			if !ok {
				pending = refs[i]
				return false, refs[i] + " does not exist yet"
			}
			if ok, now := cond.Check(o); !ok {
				pending = refs[i]
				if len(names) > 1 {
					now = refs[i] + ": " + now
				}
				return false, now
			}
		}
		return true, ""
	})
	var te *TimeoutError
	if errors.As(err, &te) {
		// Name the one object that held things up, not the whole list.
		te.What = pending
		te.Last = strings.TrimPrefix(te.Last, pending+": ")
	}
	return err
}

type progressKey struct{}

// WithProgress returns a ctx whose waits report progress to report.
func WithProgress(ctx context.Context, report func(string)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

func progress(ctx context.Context) func(string) {
	p, _ := ctx.Value(progressKey{}).(func(string))
	return p
}

// Conditions labctl waits for.

var (
	crdGK  = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
	crdGVK = crdGK.WithVersion("v1")
	// DeploymentGVK is apps/v1 Deployment.
	DeploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	// StatefulSetGVK is apps/v1 StatefulSet.
	StatefulSetGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
	// CRDGVK is apiextensions.k8s.io/v1 CustomResourceDefinition.
	CRDGVK = crdGVK
)

// CRDEstablished is met once the server serves the CRD's resources.
func CRDEstablished() Condition {
	return Condition{Name: "Established", Check: func(o *unstructured.Unstructured) (bool, string) {
		return condTrue(o, "Established")
	}}
}

// DeploymentAvailable is met when the Deployment controller has seen the
// current spec and reports Available=True.
func DeploymentAvailable() Condition {
	return Condition{Name: "Available", Check: func(o *unstructured.Unstructured) (bool, string) {
		gen := o.GetGeneration()
		obs, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
		if obs < gen {
			return false, fmt.Sprintf("the deployment controller has not seen generation %d yet (status is of generation %d)", gen, obs)
		}
		return condTrue(o, "Available")
	}}
}

// StatefulSetReady is met when the StatefulSet controller has seen the
// current spec and every replica it wants is ready at the current
// revision. A StatefulSet has no Available condition, so this reads the
// counts, as 'kubectl rollout status' does.
func StatefulSetReady() Condition {
	return Condition{Name: "Ready", Check: func(o *unstructured.Unstructured) (bool, string) {
		gen := o.GetGeneration()
		obs, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration")
		if obs < gen {
			return false, fmt.Sprintf("the statefulset controller has not seen generation %d yet (status is of generation %d)", gen, obs)
		}
		want, found, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
		if !found {
			want = 1
		}
		ready, _, _ := unstructured.NestedInt64(o.Object, "status", "readyReplicas")
		updated, _, _ := unstructured.NestedInt64(o.Object, "status", "updatedReplicas")
		if ready < want || updated < want {
			return false, fmt.Sprintf("%d of %d replicas ready, %d updated", ready, want, updated)
		}
		return true, ""
	}}
}

// ProviderReady is met when a cluster-api-operator Provider is Ready and
// has installed version.
func ProviderReady(version string) Condition {
	return Condition{Name: "Ready with installedVersion " + version, Check: func(o *unstructured.Unstructured) (bool, string) {
		ok, now := condTrue(o, "Ready")
		installed, _, _ := unstructured.NestedString(o.Object, "status", "installedVersion")
		switch {
		case installed == "" && ok:
			return false, "Ready=True but no installedVersion yet"
		case installed != version && installed != "":
			return false, fmt.Sprintf("installedVersion %s, not %s yet; %s", installed, version, now)
		}
		return ok, now
	}}
}

// condTrue reports whether status.conditions has type t with status True,
// and otherwise how that condition reads.
func condTrue(o *unstructured.Unstructured, t string) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	var types []string
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		ct, _ := m["type"].(string)
		types = append(types, ct)
		if ct != t {
			continue
		}
		st, _ := m["status"].(string)
		if st == "True" {
			return true, ""
		}
		s := t + "=" + st
		if r, _ := m["reason"].(string); r != "" {
			s += " (" + r + ")"
		}
		if msg, _ := m["message"].(string); msg != "" {
			s += ": " + msg
		}
		return false, s
	}
	if len(types) == 0 {
		return false, "no status conditions yet"
	}
	slices.Sort(types)
	return false, fmt.Sprintf("no %s condition yet (has %s)", t, strings.Join(types, ", "))
}

// CondTrue is condTrue for other packages' conditions.
func CondTrue(o *unstructured.Unstructured, t string) (bool, string) { return condTrue(o, t) }
