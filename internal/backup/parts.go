package backup

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/kube"
)

// Stage is when a restore puts a part back, relative to the Cluster API
// objects.
type Stage int

const (
	// BeforeClusters parts are what the controllers need the moment the
	// Clusters are unpaused: credentials, namespaces, a tenant's datastore.
	BeforeClusters Stage = iota
	// AfterClusters parts start once every Machine is adopted (has its
	// Node again): the autoscalers, which must not act on a cluster whose
	// machines the new management cluster has not found yet.
	AfterClusters
)

// Part is what a backup holds beside the Cluster API objects clusterctl
// moves. Each part keeps its own files under parts/<Name>/ in the archive.
//
// The Kamaji tenants' control planes (tenantControlPlanes: their Secrets
// and their keys in the DataStore, which no Cluster API object holds) are
// one, of Stage BeforeClusters: put back before the KamajiControlPlanes
// are made again and unpaused.
type Part interface {
	// Name is the part's folder in the archive; never change it once
	// backups exist.
	Name() string
	Stage() Stage
	// Backup reads the part from the source management cluster, for the
	// clusters being backed up, as files by name.
	Backup(ctx context.Context, src *kube.Client, clusters []ClusterRef) (map[string][]byte, error)
	// Restore puts files back onto dst and says, one line each, what it
	// did; with dryRun it changes nothing and says what it would do. A
	// second run changes nothing. Lines never hold secret values.
	Restore(ctx context.Context, dst *kube.Client, files map[string][]byte, dryRun bool) ([]string, error)
}

// Parts are the parts every backup holds, in restore order within a stage.
func Parts() []Part {
	return []Part{
		providerSecrets{},
		labctlObjects{name: "cluster-objects", stage: BeforeClusters, kinds: []schema.GroupVersionKind{namespaceGVK, secretGVK, clusterapi.LibvirtClusterGVK}},
		// After the namespaces it restores into.
		tenantControlPlanes{},
		labctlObjects{name: "autoscalers", stage: AfterClusters, kinds: []schema.GroupVersionKind{serviceAccountGVK, clusterRoleBindingGVK, deploymentGVK}},
	}
}

var (
	namespaceGVK          = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	secretGVK             = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	serviceAccountGVK     = schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}
	deploymentGVK         = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	clusterRoleBindingGVK = schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}
)

// labctlObjects are the objects labctl itself made for each cluster, as it
// rendered them (they carry its managed-by and cluster-name labels), that
// clusterctl does not move because no owner reference ties them to the
// Cluster: the cluster's Namespace with labctl's labels, the libvirt
// hosts' credentials Secrets, the LibvirtCluster of a pool on hosts the
// Cluster does not reference, and the cluster-autoscaler's
// ServiceAccount, ClusterRoleBinding and Deployment. An object with an
// owner is clusterctl's to move.
type labctlObjects struct {
	name  string
	stage Stage
	kinds []schema.GroupVersionKind
}

func (p labctlObjects) Name() string { return p.name }
func (p labctlObjects) Stage() Stage { return p.stage }

func (p labctlObjects) Backup(ctx context.Context, src *kube.Client, clusters []ClusterRef) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, c := range clusters {
		selector := clusterapi.LabelManagedBy + "=" + clusterapi.ManagedBy + "," + clusterapi.ClusterNameLabel + "=" + c.Name
		for _, gvk := range p.kinds {
			served, err := src.Serves(gvk)
			if err != nil {
				return nil, fmt.Errorf("asking for %s: %w", gvk.Kind, err)
			}
			if !served {
				continue // e.g. no libvirt provider on this management cluster
			}
			ns := c.Namespace
			if gvk == namespaceGVK || gvk == clusterRoleBindingGVK {
				ns = "" // cluster-scoped
			}
			list, err := src.List(ctx, gvk, ns, selector)
			if err != nil {
				return nil, fmt.Errorf("listing the %ss of cluster %s: %w", gvk.Kind, c, err)
			}
			for i := range list {
				o := &list[i]
				if (gvk == namespaceGVK && o.GetName() != c.Namespace) || len(o.GetOwnerReferences()) > 0 {
					continue
				}
				data, err := kube.MarshalYAML([]*unstructured.Unstructured{portable(o)})
				if err != nil {
					return nil, err
				}
				files[objectFile(o)] = data
			}
		}
	}
	return files, nil
}

func (p labctlObjects) Restore(ctx context.Context, dst *kube.Client, files map[string][]byte, dryRun bool) ([]string, error) {
	return restoreFiles(ctx, dst, p.name, files, dryRun)
}

// providerSecrets are the Secrets the operator's Provider CRs name in
// spec.configSecret (the providers' variables, such as CAPMOX's
// PROXMOX_URL, PROXMOX_TOKEN and PROXMOX_SECRET), with their namespaces.
type providerSecrets struct{}

func (providerSecrets) Name() string { return "provider-secrets" }
func (providerSecrets) Stage() Stage { return BeforeClusters }

func (providerSecrets) Backup(ctx context.Context, src *kube.Client, _ []ClusterRef) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, gvk := range components.ProviderGVKs() {
		served, err := src.Serves(gvk)
		if err != nil {
			return nil, fmt.Errorf("asking for the operator's %s kind: %w", gvk.Kind, err)
		}
		if !served {
			continue
		}
		list, err := src.List(ctx, gvk, "", "")
		if err != nil {
			return nil, fmt.Errorf("listing the %ss: %w", gvk.Kind, err)
		}
		for _, prov := range list {
			name, _, _ := unstructured.NestedString(prov.Object, "spec", "configSecret", "name")
			if name == "" {
				continue
			}
			ns, _, _ := unstructured.NestedString(prov.Object, "spec", "configSecret", "namespace")
			if ns == "" {
				ns = prov.GetNamespace()
			}
			s, found, err := src.Get(ctx, kube.Ref{GVK: secretGVK, Namespace: ns, Name: name})
			if err != nil {
				return nil, fmt.Errorf("reading %s %s/%s's configSecret: %w", gvk.Kind, prov.GetNamespace(), prov.GetName(), err)
			}
			if !found {
				return nil, fmt.Errorf("%s %s/%s names configSecret %s/%s, which does not exist: run 'labctl mgmt install' to make it, then back up again", gvk.Kind, prov.GetNamespace(), prov.GetName(), ns, name)
			}
			// With its namespace, for a target where the provider is not
			// installed yet.
			nsObj, found, err := src.Get(ctx, kube.Ref{GVK: namespaceGVK, Name: ns})
			if err != nil || !found {
				return nil, fmt.Errorf("reading namespace %s: %v", ns, err)
			}
			for _, o := range []*unstructured.Unstructured{nsObj, s} {
				data, err := kube.MarshalYAML([]*unstructured.Unstructured{portable(o)})
				if err != nil {
					return nil, err
				}
				files[objectFile(o)] = data
			}
		}
	}
	return files, nil
}

func (p providerSecrets) Restore(ctx context.Context, dst *kube.Client, files map[string][]byte, dryRun bool) ([]string, error) {
	return restoreFiles(ctx, dst, p.Name(), files, dryRun)
}

// restoreFiles restores a part whose files are objects.
func restoreFiles(ctx context.Context, dst *kube.Client, part string, files map[string][]byte, dryRun bool) ([]string, error) {
	objs, err := objectsOf(part, files)
	if err != nil {
		return nil, err
	}
	return restoreObjects(ctx, dst, objs, dryRun)
}

// restoreObjects makes each object that dst lacks, with server-side apply
// as labctl. One that exists is left as it is and said so: the target's
// own (a Secret 'mgmt install' made there from lab.yaml, a namespace
// clusterctl made) is newer than the backup's.
func restoreObjects(ctx context.Context, dst *kube.Client, objs []*unstructured.Unstructured, dryRun bool) ([]string, error) {
	var lines, missing []string
	var create []*unstructured.Unstructured
	for _, o := range objs {
		ref := kube.RefOf(o)
		live, found, err := dst.Get(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("reading %s on the target: %w", ref, err)
		}
		switch {
		case !found:
			create = append(create, o)
			missing = append(missing, ref.String())
		case o.GetKind() == "Secret" && !sameData(live, o):
			lines = append(lines, fmt.Sprintf("%s exists on the target with other data: the target's is kept", ref))
		default:
			lines = append(lines, fmt.Sprintf("%s exists on the target: kept", ref))
		}
	}
	verb := "created "
	if dryRun {
		verb = "would create "
	} else if len(create) > 0 {
		if _, err := dst.Apply(ctx, create, kube.ApplyOptions{}); err != nil {
			return nil, fmt.Errorf("restoring %s: %w", strings.Join(missing, ", "), err)
		}
	}
	for _, m := range missing {
		lines = append(lines, verb+m)
	}
	sort.Strings(lines)
	return lines, nil
}

func sameData(a, b *unstructured.Unstructured) bool {
	da, _, _ := unstructured.NestedStringMap(a.Object, "data")
	db, _, _ := unstructured.NestedStringMap(b.Object, "data")
	if len(da) != len(db) {
		return false
	}
	for k, v := range da {
		if w, ok := db[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// objectsOf decodes a part's object files.
func objectsOf(part string, files map[string][]byte) ([]*unstructured.Unstructured, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*unstructured.Unstructured
	for _, n := range names {
		objs, err := kube.ParseObjects(partsTo+"/"+part+"/"+n, files[n])
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// portable is obj as it can be created on another cluster: without what
// the source's API server set (uid, resourceVersion, timestamps, managed
// fields, status) and without labctl's apply hash, which Apply sets anew.
func portable(obj *unstructured.Unstructured) *unstructured.Unstructured {
	o := obj.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
		unstructured.RemoveNestedField(o.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(o.Object, "status")
	ann := o.GetAnnotations()
	for _, a := range []string{kube.HashAnnotation, "deployment.kubernetes.io/revision", "kubectl.kubernetes.io/last-applied-configuration"} {
		delete(ann, a)
	}
	if len(ann) == 0 {
		ann = nil
	}
	o.SetAnnotations(ann)
	return o
}

// objectFile names an object's file as clusterctl names its own:
// <Kind>_<namespace>_<name>.yaml.
func objectFile(o *unstructured.Unstructured) string {
	return o.GetKind() + "_" + o.GetNamespace() + "_" + o.GetName() + ".yaml"
}

// describeFiles lists a part's objects for a dry run: kind, namespace and
// name, never contents.
func describeFiles(files map[string][]byte) []string {
	var out []string
	for n := range files {
		out = append(out, strings.TrimSuffix(n, ".yaml"))
	}
	sort.Strings(out)
	return out
}
