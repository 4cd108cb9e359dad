package cmd

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// TestEveryExampleInstallsWhatItsClustersNeed runs each examples/*.yaml
// as a newcomer would: 'mgmt install --dry-run -o yaml', then 'cluster
// create NAME --dry-run -o yaml' for each of its clusters. Every kind a
// cluster applies must be served by a provider the install's plan puts in
// (issue 24: lab-mixed.yaml validated, yet its KVM pool needed a libvirt
// provider the install left out), and every ClusterRole and ClusterClass
// the cluster names must be in the install too.
//
// cluster create runs with -o yaml: its plain dry run compares with a
// management cluster whose providers are running (its first step checks
// that each kind is served), and an install's dry run applies nothing, so
// only the printed objects can be set side by side.
//
// The management cluster is a bare kube-apiserver standing in for k3s
// (its HelmChart CRD included, so the charts go in as HelmChart objects,
// as on the management VM). Nothing leaves this machine: a chart that
// needed a download would show as "not rendered".
func TestEveryExampleInstallsWhatItsClustersNeed(t *testing.T) {
	examples, _ := filepath.Glob("../examples/*.yaml")
	if len(examples) < 4 {
		t.Fatalf("found %d examples", len(examples))
	}
	env := testbed.Start(t, testbed.WithCRDs("helm-controller"))
	testbed.ExampleHome(t) // the CA file examples/lab.yaml's tls.caFile names
	// The key management.sshPublicKeyFile names, which the clusters'
	// objects carry.
	key := filepath.Join(os.Getenv("HOME"), ".ssh", "id_ed25519.pub")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	// Dry runs never read the Proxmox token secret.
	t.Setenv("PVE_TOKEN_SECRET", "")
	os.Unsetenv("PVE_TOKEN_SECRET")
	wantProviders := map[string][]string{
		"lab.yaml":       {"InfrastructureProvider proxmox"},
		"lab-mixed.yaml": {"InfrastructureProvider proxmox", "InfrastructureProvider libvirt"},
		"lab-tenants.yaml": {"InfrastructureProvider proxmox", "InfrastructureProvider libvirt",
			"ControlPlaneProvider kamaji"},
		"local-kvm.yaml": nil, // no cluster yet: the management VM alone
	}
	for _, path := range examples {
		base := filepath.Base(path)
		t.Run(base, func(t *testing.T) {
			code, stdout, stderr := run(t, "", "mgmt", "install", "-c", path, "--kubeconfig", env.Kubeconfig, "--dry-run", "-o", "yaml")
			if code != 0 {
				t.Fatalf("mgmt install --dry-run -o yaml: exit %d\n%s", code, stderr)
			}
			if strings.Contains(stdout+stderr, "not rendered") {
				t.Errorf("the install's dry run needed the network:\n%s", stderr)
			}
			install := objectsOf(t, "mgmt install", stdout)
			provided := map[string]string{} // "InfrastructureProvider proxmox" → its ref
			for _, o := range install {
				if strings.HasSuffix(o.GetKind(), "Provider") && o.GroupVersionKind().Group == "operator.cluster.x-k8s.io" {
					provided[o.GetKind()+" "+o.GetName()] = kube.RefOf(o).String()
				}
			}
			// Each provider is in the plan a user reads, not only in the
			// objects.
			for p, ref := range provided {
				if !strings.Contains(stderr, "would: create "+ref) {
					t.Errorf("the plan does not say it installs %s; want %q in:\n%s", p, "would: create "+ref, stderr)
				}
			}
			want, ok := wantProviders[base]
			if !ok {
				t.Fatalf("a new example: say which providers %s needs in wantProviders", base)
			}
			for _, p := range want {
				if provided[p] == "" {
					t.Errorf("mgmt install of %s leaves out %s; it installs %v", base, p, slices.Sorted(maps.Keys(provided)))
				}
			}

			lab, _, err := config.Load(context.Background(), config.Request{Path: path, Explicit: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range lab.Clusters {
				code, stdout, stderr := run(t, "", "cluster", "create", c.Name, "-c", path, "--dry-run", "-o", "yaml")
				if code != 0 {
					t.Errorf("cluster create %s --dry-run -o yaml: exit %d\n%s", c.Name, code, stderr)
					continue
				}
				if strings.Contains(stdout+stderr, "not rendered") {
					t.Errorf("cluster create %s --dry-run needed the network:\n%s", c.Name, stderr)
				}
				for _, miss := range missingFromInstall(t, objectsOf(t, "cluster create "+c.Name, stdout), install, provided) {
					t.Errorf("cluster create %s needs %s, which mgmt install --dry-run of %s does not put in", c.Name, miss, base)
				}
			}
		})
	}
}

func objectsOf(t *testing.T, what, yaml string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := kube.ParseObjects(what, []byte(yaml))
	if err != nil || len(objs) == 0 {
		t.Fatalf("%s printed %d objects (%v):\n%.2000s", what, len(objs), err, yaml)
	}
	return objs
}

// providers maps an API group and a kind's prefix to the operator
// Provider whose controller serves it; provider "" is Kubernetes' own.
var providers = []struct{ group, kindPrefix, provider string }{
	{"", "", ""}, {"apps", "", ""}, {"rbac.authorization.k8s.io", "", ""},
	{"cluster.x-k8s.io", "", "CoreProvider cluster-api"},
	{"addons.cluster.x-k8s.io", "", "CoreProvider cluster-api"},
	{"bootstrap.cluster.x-k8s.io", "Kubeadm", "BootstrapProvider kubeadm"},
	{"controlplane.cluster.x-k8s.io", "Kubeadm", "ControlPlaneProvider kubeadm"},
	{"controlplane.cluster.x-k8s.io", "Kamaji", "ControlPlaneProvider kamaji"},
	{"infrastructure.cluster.x-k8s.io", "Proxmox", "InfrastructureProvider proxmox"},
	{"infrastructure.labctl.dev", "Libvirt", "InfrastructureProvider libvirt"},
	{"ipam.cluster.x-k8s.io", "InCluster", "IPAMProvider in-cluster"},
}

// providerOf names the operator Provider whose controller serves gvk. An
// unknown kind fails the test, so a new one is mapped in providers rather
// than passed over.
func providerOf(t *testing.T, gvk schema.GroupVersionKind) string {
	t.Helper()
	for _, p := range providers {
		if p.group == gvk.Group && strings.HasPrefix(gvk.Kind, p.kindPrefix) {
			return p.provider
		}
	}
	t.Fatalf("no provider known for %s: map it in providers", gvk)
	return ""
}

// missingFromInstall lists what the cluster's objects need that the
// install's objects lack: the provider of each kind, each ClusterRole a
// binding names, and each ClusterClass a Cluster names, with the kinds of
// that class's templates.
func missingFromInstall(t *testing.T, cluster, install []*unstructured.Unstructured, provided map[string]string) []string {
	t.Helper()
	have := map[string]*unstructured.Unstructured{}
	for _, o := range install {
		have[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = o
	}
	var missing []string
	need := func(what string) {
		if !slices.Contains(missing, what) {
			missing = append(missing, what)
		}
	}
	needKind := func(gvk schema.GroupVersionKind) {
		if p := providerOf(t, gvk); p != "" && provided[p] == "" {
			need(p + " (for " + gvk.Kind + ")")
		}
	}
	for _, o := range cluster {
		needKind(o.GroupVersionKind())
		if role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name"); role != "" && have["ClusterRole /"+role] == nil {
			need("ClusterRole " + role)
		}
		class, _, _ := unstructured.NestedString(o.Object, "spec", "topology", "classRef", "name")
		if o.GetKind() != "Cluster" || class == "" {
			continue
		}
		ns, _, _ := unstructured.NestedString(o.Object, "spec", "topology", "classRef", "namespace")
		if ns == "" {
			ns = o.GetNamespace()
		}
		cc := have["ClusterClass "+ns+"/"+class]
		if cc == nil {
			need("ClusterClass " + ns + "/" + class)
			continue
		}
		for _, ref := range templateRefs(cc.Object) {
			needKind(schema.FromAPIVersionAndKind(ref["apiVersion"], ref["kind"]))
			if have[ref["kind"]+" "+cc.GetNamespace()+"/"+ref["name"]] == nil {
				need(ref["kind"] + " " + cc.GetNamespace() + "/" + ref["name"] + " (of ClusterClass " + class + ")")
			}
		}
	}
	return missing
}

// templateRefs are the templateRef maps (apiVersion, kind, name) anywhere
// under v.
func templateRefs(v any) []map[string]string {
	var out []map[string]string
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if m, ok := val.(map[string]any); ok && k == "templateRef" {
				kind, _ := m["kind"].(string)
				name, _ := m["name"].(string)
				av, _ := m["apiVersion"].(string)
				out = append(out, map[string]string{"kind": kind, "name": name, "apiVersion": av})
				continue
			}
			out = append(out, templateRefs(val)...)
		}
	case []any:
		for _, val := range x {
			out = append(out, templateRefs(val)...)
		}
	}
	return out
}
