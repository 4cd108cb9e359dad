package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// FieldManager owns every field labctl applies.
const FieldManager = "labctl"

// HashAnnotation holds a digest of what labctl last applied to an object.
// With it a re-run knows, without writing, that a field labctl once set and
// no longer sets must still be removed.
const HashAnnotation = "labctl.dev/apply-hash"

// Action is what applying does to one object.
type Action string

// Actions, as plans and reports show them.
const (
	Create    Action = "create"
	Update    Action = "update"
	Unchanged Action = "unchanged"
)

// Ref names one object for people: "Deployment cert-manager/cert-manager".
type Ref struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
}

// RefOf returns the Ref of obj.
func RefOf(obj *unstructured.Unstructured) Ref {
	return Ref{GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.GVK.Kind + " " + r.Name
	}
	return r.GVK.Kind + " " + r.Namespace + "/" + r.Name
}

// API is the part of Client the use cases that read and patch Cluster API
// objects call (cluster list and scale): the seam before the API server,
// as clusterctl's fake proxy is (cmd/clusterctl/internal/test). Their
// rules get millisecond tests against kubefake.Client; the tests against
// a real API server drive Client.
type API interface {
	Host() string
	Serves(gvk schema.GroupVersionKind) (bool, error)
	Get(ctx context.Context, ref Ref) (obj *unstructured.Unstructured, found bool, err error)
	List(ctx context.Context, gvk schema.GroupVersionKind, namespace, selector string) ([]unstructured.Unstructured, error)
	Apply(ctx context.Context, objs []*unstructured.Unstructured, o ApplyOptions) ([]Change, error)
}

var _ API = (*Client)(nil)

// Change is what Apply did, or Plan would do, to one object.
type Change struct {
	Ref    Ref
	Action Action
	// Why is set when the reason is not obvious, e.g. "its CRD is not
	// installed yet".
	Why string
}

func (c Change) String() string {
	s := string(c.Action) + " " + c.Ref.String()
	if c.Why != "" {
		s += " (" + c.Why + ")"
	}
	return s
}

// Changed keeps the changes that are not Unchanged.
func Changed(cs []Change) []Change {
	var out []Change
	for _, c := range cs {
		if c.Action != Unchanged {
			out = append(out, c)
		}
	}
	return out
}

// dyn returns the dynamic client and a REST mapper that discovers new
// kinds (freshly established CRDs) when it first meets them.
func (c *Client) dyn() (dynamic.Interface, meta.RESTMapper, error) {
	c.dynOnce.Do(func() {
		hc, err := rest.HTTPClientFor(c.config)
		if err != nil {
			c.dynErr = fmt.Errorf("creating a client for %s: %w", c.config.Host, err)
			return
		}
		c.dynClient, err = dynamic.NewForConfigAndClient(c.config, hc)
		if err != nil {
			c.dynErr = fmt.Errorf("creating a client for %s: %w", c.config.Host, err)
			return
		}
		c.mapper, err = apiutil.NewDynamicRESTMapper(c.config, hc)
		if err != nil {
			c.dynErr = fmt.Errorf("creating a client for %s: %w", c.config.Host, err)
		}
	})
	return c.dynClient, c.mapper, c.dynErr
}

// resource finds the REST resource of gvk. ok is false when the server does
// not serve the kind (its CRD is missing).
func (c *Client) resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, bool, error) {
	dc, mapper, err := c.dyn()
	if err != nil {
		return nil, false, err
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("looking up %s on %s: %w", gvk, c.config.Host, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		return dc.Resource(m.Resource), true, nil
	}
	return dc.Resource(m.Resource).Namespace(namespace), true, nil
}

// Plural is the resource name of kind gk in the server's discovery (the
// plural of its CRD's <plural>.<group> name); ok is false when the server
// does not serve the kind.
func (c *Client) Plural(gk schema.GroupKind) (plural string, ok bool, err error) {
	_, mapper, err := c.dyn()
	if err != nil {
		return "", false, err
	}
	m, err := mapper.RESTMapping(gk)
	if meta.IsNoMatchError(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("looking up %s on %s: %w", gk, c.config.Host, err)
	}
	return m.Resource.Resource, true, nil
}

// Serves reports whether the server serves kind gvk. For a custom kind
// that means its CRD is Established: discovery lists it only then.
func (c *Client) Serves(gvk schema.GroupVersionKind) (bool, error) {
	_, served, err := c.resource(gvk, "")
	return served, err
}

// Get reads one object; found is false when it (or its kind) does not
// exist.
func (c *Client) Get(ctx context.Context, ref Ref) (obj *unstructured.Unstructured, found bool, err error) {
	ri, served, err := c.resource(ref.GVK, ref.Namespace)
	if err != nil || !served {
		return nil, false, err
	}
	obj, err = ri.Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", ref, err)
	}
	return obj, true, nil
}

// List reads the objects of one kind in namespace ("" for all or for
// cluster-scoped kinds) that match selector. A kind the server does not
// serve lists as empty.
func (c *Client) List(ctx context.Context, gvk schema.GroupVersionKind, namespace, selector string) ([]unstructured.Unstructured, error) {
	ri, served, err := c.resource(gvk, namespace)
	if err != nil || !served {
		return nil, err
	}
	l, err := ri.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing %s in %q: %w", gvk.Kind, namespace, err)
	}
	return l.Items, nil
}

// Plan says what Apply would do to each object, reading only.
func (c *Client) Plan(ctx context.Context, objs []*unstructured.Unstructured) ([]Change, error) {
	out := make([]Change, 0, len(objs))
	for _, o := range objs {
		ch, _, err := c.plan(ctx, o)
		if err != nil {
			return out, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// plan compares one object with the server and returns the object as
// labctl would send it (with its hash annotation).
func (c *Client) plan(ctx context.Context, desired *unstructured.Unstructured) (Change, *unstructured.Unstructured, error) {
	want, err := withHash(desired)
	if err != nil {
		return Change{}, nil, err
	}
	ref := RefOf(want)
	ch := Change{Ref: ref, Action: Create}
	ri, served, err := c.resource(ref.GVK, ref.Namespace)
	if err != nil {
		return ch, want, err
	}
	if !served {
		ch.Why = "its CRD is not installed yet"
		return ch, want, nil
	}
	live, err := ri.Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ch, want, nil
	case err != nil:
		return ch, want, fmt.Errorf("reading %s: %w", ref, err)
	}
	if contains(live.Object, want.Object) {
		ch.Action = Unchanged
		return ch, want, nil
	}
	ch.Action = Update
	return ch, want, nil
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// CRDTimeout bounds the wait for applied CRDs to be Established
	// (default 1 minute).
	CRDTimeout time.Duration
	// Progress, when set, hears what Apply is doing.
	Progress func(msg string)
	// FieldManager applies as another manager than labctl, for commands
	// that own a few fields of an object labctl applies in full (e.g.
	// 'cluster scale'): applying a partial object as labctl would drop
	// every field it leaves out.
	FieldManager string
}

// Apply makes the server hold objs, with server-side apply as field manager
// labctl, and writes only objects that differ. Namespaces go first, then
// CRDs, which must be Established before the rest. Every object is
// validated strictly: an unknown field is an error, not dropped.
func (c *Client) Apply(ctx context.Context, objs []*unstructured.Unstructured, o ApplyOptions) ([]Change, error) {
	if o.CRDTimeout <= 0 {
		o.CRDTimeout = time.Minute
	}
	var nss, crds, rest []*unstructured.Unstructured
	for _, obj := range objs {
		switch obj.GroupVersionKind().GroupKind() {
		case schema.GroupKind{Kind: "Namespace"}:
			nss = append(nss, obj)
		case crdGK:
			crds = append(crds, obj)
		default:
			rest = append(rest, obj)
		}
	}
	var out []Change
	for i, group := range [][]*unstructured.Unstructured{nss, crds, rest} {
		for _, obj := range group {
			ch, err := c.applyOne(ctx, obj, o.FieldManager)
			if err != nil {
				return out, err
			}
			out = append(out, ch)
		}
		if i == 1 && len(crds) > 0 {
			names := make([]string, len(crds))
			for j, d := range crds {
				names[j] = d.GetName()
			}
			if o.Progress != nil {
				o.Progress(fmt.Sprintf("waiting for %d CRD(s) to be Established", len(names)))
			}
			if err := c.WaitFor(ctx, crdGVK, "", names, CRDEstablished(), o.CRDTimeout); err != nil {
				return out, err
			}
			if err := c.waitServed(ctx, crds, o.CRDTimeout); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// waitServed waits until discovery lists the kinds of crds. The API server
// marks a CRD Established before its discovery document names the new
// kind (the two are updated apart), so objects of that kind applied at
// once could be refused as not served.
func (c *Client) waitServed(ctx context.Context, crds []*unstructured.Unstructured, timeout time.Duration) error {
	var gvks []schema.GroupVersionKind
	for _, d := range crds {
		group, _, _ := unstructured.NestedString(d.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(d.Object, "spec", "names", "kind")
		vs, _, _ := unstructured.NestedSlice(d.Object, "spec", "versions")
		for _, v := range vs {
			m, _ := v.(map[string]any)
			name, _ := m["name"].(string)
			if served, _ := m["served"].(bool); served && name != "" {
				gvks = append(gvks, schema.GroupVersionKind{Group: group, Version: name, Kind: kind})
			}
		}
	}
	deadline := time.Now().Add(timeout)
	for _, gvk := range gvks {
		for {
			served, err := c.Serves(gvk)
			if err != nil {
				return err
			}
			if served {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("waiting for the server to serve %s: its CRD is Established but discovery does not list it after %s", gvk, timeout)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for the server to serve %s: %w", gvk, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

func (c *Client) applyOne(ctx context.Context, obj *unstructured.Unstructured, manager string) (Change, error) {
	if manager == "" {
		manager = FieldManager
	}
	ch, want, err := c.plan(ctx, obj)
	if err != nil || ch.Action == Unchanged {
		return ch, err
	}
	ri, served, err := c.resource(ch.Ref.GVK, ch.Ref.Namespace)
	if err != nil {
		return ch, err
	}
	if !served {
		return ch, fmt.Errorf("applying %s: the server does not serve %s; install its CRD first", ch.Ref, ch.Ref.GVK.GroupVersion().WithKind(ch.Ref.GVK.Kind))
	}
	data, err := json.Marshal(want.Object)
	if err != nil {
		return ch, fmt.Errorf("applying %s: encoding: %w", ch.Ref, err)
	}
	force := true
	_, err = ri.Patch(ctx, ch.Ref.Name, types.ApplyPatchType, data, metav1.PatchOptions{
		FieldManager:    manager,
		Force:           &force,
		FieldValidation: "Strict",
	})
	if err != nil {
		return ch, fmt.Errorf("applying %s: %w", ch.Ref, err)
	}
	ch.Why = ""
	return ch, nil
}

// withHash returns a copy of obj carrying the digest of its content.
func withHash(obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	out := obj.DeepCopy()
	ann := out.GetAnnotations()
	delete(ann, HashAnnotation)
	if len(ann) == 0 {
		ann = nil
	}
	out.SetAnnotations(ann)
	data, err := json.Marshal(out.Object) // map keys are sorted: stable
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", RefOf(obj), err)
	}
	sum := sha256.Sum256(data)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[HashAnnotation] = hex.EncodeToString(sum[:12])
	out.SetAnnotations(ann)
	// Numbers decode from JSON as float64 on the server side of the
	// comparison; bring ours to the same shape.
	var norm map[string]any
	if err := json.Unmarshal(mustJSON(out.Object), &norm); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", RefOf(obj), err)
	}
	out.Object = norm
	return out, nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// contains reports whether live holds every field of want with the same
// value. Fields only the server or other managers set are ignored.
func contains(live, want map[string]any) bool {
	var l map[string]any
	if err := json.Unmarshal(mustJSON(live), &l); err != nil {
		return false
	}
	return subset(l, want)
}

func subset(live, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			lv, ok := l[k]
			if !ok {
				if isEmpty(wv) {
					continue // the server drops empty maps, lists and nulls
				}
				return false
			}
			if !subset(lv, wv) {
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
	}
	return reflect.DeepEqual(live, want)
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}
