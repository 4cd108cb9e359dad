package clusterapi_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

// ssa server-side applies obj as labctl would: field manager labctl,
// strict field validation, optionally as a dry run.
func ssa(ctx context.Context, c client.Client, obj *unstructured.Unstructured, dryRun bool) error {
	opts := []client.ApplyOption{client.FieldOwner("labctl"), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()), opts...)
}

// TestRenderedObjectsPassTheRealAPI renders every cluster of the owner's lab
// and of the valid test labs, tenants included, and applies each object to
// a real kube-apiserver with the pinned CAPI v1.12.11, CAPMOX v0.9.0 and
// IPAM CRDs and labctl's own libvirt provider's: first as a server-side dry
// run, then for real. A second apply of the same objects must change
// nothing.
func TestRenderedObjectsPassTheRealAPI(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi", "capmox", "ipam"), testbed.WithCRDPaths("../../embedded/provider/libvirt/crds"))
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c = client.WithFieldValidation(c, "Strict")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	labs := map[string]string{
		"examples/lab.yaml":       "../../examples/lab.yaml",
		"examples/lab-mixed.yaml": "../../examples/lab-mixed.yaml",
		// Tenants: Clusters of labctl's ClusterClasses.
		"examples/lab-tenants.yaml": tenantsExample,
	}
	valid, _ := filepath.Glob("../config/testdata/valid/*.yaml")
	for _, p := range valid {
		labs[filepath.Base(p)] = p
	}
	// The check has teeth: the same API rejects a field the CRD lacks and a
	// value its schema forbids.
	bad := render(t, load(t, "../../examples/lab.yaml"), "lab1")
	if err := ssa(ctx, c, bad.Objects[0], false); err != nil {
		t.Fatal(err)
	}
	pc := bad.Find("ProxmoxCluster", "").DeepCopy()
	_ = unstructured.SetNestedField(pc.Object, "x", "spec", "notAField")
	if err := ssa(ctx, c, pc, true); err == nil {
		t.Error("the API server accepted ProxmoxCluster spec.notAField; the validation check proves nothing")
	}
	pmt := bad.Objects[2].DeepCopy()
	_ = unstructured.SetNestedSlice(pmt.Object, []any{map[string]any{"name": "eth0", "bridge": "vmbr0"}}, "spec", "template", "spec", "network", "networkDevices")
	if err := ssa(ctx, c, pmt, true); err == nil {
		t.Error("the API server accepted a network device named eth0 (CAPMOX wants net<N>)")
	}

	for name, path := range labs {
		lab := load(t, path)
		for _, cl := range lab.Clusters {
			r := render(t, lab, cl.Name)
			// As create applies them: the credentials Secrets right after
			// the namespace, with the data the reader gave (creds).
			objs := append(append([]*unstructured.Unstructured{}, r.Objects...), r.Autoscaler...)
			// The namespace first, for real: dry runs need it to exist.
			if err := ssa(ctx, c, objs[0], false); err != nil {
				t.Fatalf("%s %s: applying namespace: %v", name, cl.Name, err)
			}
			for _, o := range objs[1:] {
				if err := ssa(ctx, c, o, true); err != nil {
					t.Errorf("%s: %s %s/%s rejected by server-side dry run: %v", name, o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			for _, o := range objs[1:] {
				if err := ssa(ctx, c, o, false); err != nil {
					t.Errorf("%s: %s %s/%s rejected: %v", name, o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			before := versionsOf(ctx, t, c, objs)
			for _, o := range objs {
				if err := ssa(ctx, c, o, false); err != nil {
					t.Fatalf("re-apply %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}
			if after := versionsOf(ctx, t, c, objs); !equalJSON(before, after) {
				t.Errorf("%s %s: re-applying unchanged objects changed them: %v → %v", name, cl.Name, before, after)
			}
			t.Logf("%s: cluster %s: %d objects accepted", name, cl.Name, len(objs))
		}
	}
}

func versionsOf(ctx context.Context, t *testing.T, c client.Client, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			t.Fatalf("reading %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		out[o.GetKind()+"/"+o.GetName()] = live.GetResourceVersion()
	}
	return out
}

// TestTenantClassesPassTheRealAPI applies labctl's tenant ClusterClasses
// and their templates, for each lab with tenants, to a real kube-apiserver
// with the Kamaji control plane provider v0.20.0's CRDs beside Cluster
// API's, CAPMOX's and labctl's libvirt provider's, twice: the second apply
// changes nothing. The same API refuses a field the Kamaji template lacks.
func TestTenantClassesPassTheRealAPI(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi", "capmox", "kamaji"), testbed.WithCRDPaths("../../embedded/provider/libvirt/crds"))
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c = client.WithFieldValidation(c, "Strict")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, path := range []string{tenantsExample, "../config/testdata/valid/tenants.yaml"} {
		classes, err := clusterapi.TenantClusterClasses(clusterapi.Input{Lab: load(t, path), Credentials: creds{}, Pins: versions.MustGet()})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(classes) < 2 {
			t.Fatalf("%s: no tenant ClusterClasses rendered", path)
		}
		for _, o := range classes {
			if err := ssa(ctx, c, o, false); err != nil {
				t.Errorf("%s: %s %s/%s rejected: %v", path, o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
		before := versionsOf(ctx, t, c, classes)
		for _, o := range classes {
			if err := ssa(ctx, c, o, false); err != nil {
				t.Fatalf("re-apply %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
		if after := versionsOf(ctx, t, c, classes); !equalJSON(before, after) {
			t.Errorf("%s: re-applying unchanged classes changed them: %v → %v", path, before, after)
		}
		t.Logf("%s: %d tenant ClusterClass objects accepted", path, len(classes))
	}
	objs, err := clusterapi.TenantClusterClasses(clusterapi.Input{Lab: load(t, tenantsExample), Credentials: creds{}})
	if err != nil {
		t.Fatal(err)
	}
	bad := objs[1].DeepCopy() // the KamajiControlPlaneTemplate
	_ = unstructured.SetNestedField(bad.Object, "x", "spec", "template", "spec", "network", "notAField")
	if err := ssa(ctx, c, bad, true); err == nil {
		t.Errorf("the API server accepted %s spec.template.spec.network.notAField; the check proves nothing", bad.GetKind())
	}
}
