// Package kubefake is an in-memory kube.API, for millisecond tests of the
// rules of use cases that read and patch objects (cluster list and
// scale), as clusterctl's fake proxy stands in for a cluster
// (cmd/clusterctl/internal/test/fake_proxy.go). It keeps objects by
// reference and applies as server-side apply does for the fields a patch
// names: maps merge, everything else is replaced. Behaviour a real API
// server adds (defaulting, validation, field ownership, watches) is the
// job of the tests that run one.
package kubefake

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/kube"
)

// Client is an in-memory cluster at Host that serves the kinds of the
// objects it was given (and any added with Serve).
type Client struct {
	Addr    string
	objects map[kube.Ref]*unstructured.Unstructured
	served  map[schema.GroupVersionKind]bool
	// Applied lists every Apply call's objects and field manager, in order.
	Applied []Applied
}

// Applied is one Apply call.
type Applied struct {
	Objects      []*unstructured.Unstructured
	FieldManager string
}

var _ kube.API = (*Client)(nil)

// New returns a cluster holding copies of objs.
func New(objs ...*unstructured.Unstructured) *Client {
	c := &Client{Addr: "https://fake.invalid:6443", objects: map[kube.Ref]*unstructured.Unstructured{}, served: map[schema.GroupVersionKind]bool{}}
	for _, o := range objs {
		c.put(o.DeepCopy())
	}
	return c
}

// Serve makes the cluster serve gvk without holding any object of it.
func (c *Client) Serve(gvk schema.GroupVersionKind) { c.served[gvk] = true }

func (c *Client) put(o *unstructured.Unstructured) {
	c.served[o.GroupVersionKind()] = true
	c.objects[kube.RefOf(o)] = o
}

// Host is the cluster's address.
func (c *Client) Host() string { return c.Addr }

// Serves reports whether the cluster has gvk.
func (c *Client) Serves(gvk schema.GroupVersionKind) (bool, error) { return c.served[gvk], nil }

// Get returns a copy of the object ref names.
func (c *Client) Get(_ context.Context, ref kube.Ref) (*unstructured.Unstructured, bool, error) {
	o, ok := c.objects[ref]
	if !ok {
		return nil, false, nil
	}
	return o.DeepCopy(), true, nil
}

// List returns copies of the objects of gvk in namespace ("" for every
// one) whose labels match selector, by namespace and name.
func (c *Client) List(_ context.Context, gvk schema.GroupVersionKind, namespace, selector string) ([]unstructured.Unstructured, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("listing %s: selector %q: %w", gvk.Kind, selector, err)
	}
	if !c.served[gvk] {
		return nil, fmt.Errorf("listing %s: the server does not serve %s", gvk.Kind, gvk.GroupVersion())
	}
	var out []unstructured.Unstructured
	for ref, o := range c.objects {
		if ref.GVK != gvk || (namespace != "" && ref.Namespace != namespace) || !sel.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		out = append(out, *o.DeepCopy())
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].GetNamespace()+"/"+out[i].GetName() < out[j].GetNamespace()+"/"+out[j].GetName()
	})
	return out, nil
}

// Apply merges each object into the one stored (creating it when
// missing) and says what changed.
func (c *Client) Apply(_ context.Context, objs []*unstructured.Unstructured, o kube.ApplyOptions) ([]kube.Change, error) {
	applied := Applied{FieldManager: o.FieldManager}
	var changes []kube.Change
	for _, obj := range objs {
		applied.Objects = append(applied.Objects, obj.DeepCopy())
		ref := kube.RefOf(obj)
		if !c.served[ref.GVK] {
			return changes, fmt.Errorf("applying %s: the server does not serve %s", ref, ref.GVK.GroupVersion())
		}
		cur, ok := c.objects[ref]
		if !ok {
			c.put(obj.DeepCopy())
			changes = append(changes, kube.Change{Ref: ref, Action: kube.Create})
			continue
		}
		merged := cur.DeepCopy()
		merge(merged.Object, obj.DeepCopy().Object)
		ch := kube.Change{Ref: ref, Action: kube.Unchanged}
		if !equality.Semantic.DeepEqual(merged.Object, cur.Object) {
			ch.Action = kube.Update
			c.objects[ref] = merged
		}
		changes = append(changes, ch)
	}
	c.Applied = append(c.Applied, applied)
	return changes, nil
}

// merge puts patch into dst: maps merge key by key, anything else is
// replaced. (Server-side apply merges lists with merge keys by key; the
// fake replaces them, so a test of a list patch checks the whole list.)
func merge(dst, patch map[string]any) {
	for k, v := range patch {
		pm, ok := v.(map[string]any)
		dm, dok := dst[k].(map[string]any)
		if ok && dok {
			merge(dm, pm)
			continue
		}
		dst[k] = v
	}
}

// String lists the objects held, for failure messages.
func (c *Client) String() string {
	var refs []string
	for ref := range c.objects {
		refs = append(refs, ref.String())
	}
	sort.Strings(refs)
	return strings.Join(refs, ", ")
}
