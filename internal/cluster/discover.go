package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
)

// This file walks a Cluster's objects as clusterctl describe cluster does
// (sigs.k8s.io/cluster-api v1.12, cmd/clusterctl/client/tree/discovery.go,
// with Echo on and no grouping, as labctl called it before). labctl does not
// link that package: it pulls controller-runtime's manager, webhooks and
// metrics and gobuffalo/flect into the binary, whose package
// initialisation cost every labctl start about 9 ms and 5 MiB (measured
// with GODEBUG=inittrace=1), for one command. What it reads is a few lists
// and references, done here on the unstructured client labctl already has.
//
// One departure: clusterctl shows the Workers group only while a worker
// Machine exists, so a pool scaled to zero vanishes from its tree. In a lab
// that scales from zero that is the usual state, so labctl shows every
// MachineDeployment.

// contractLabelPrefix is the label group of Cluster API's contract labels on
// provider CRDs: cluster.x-k8s.io/<contract>: <version>_<version>...
const contractLabelPrefix = "cluster.x-k8s.io/"

// contracts are the contract versions labctl's Cluster API (v1beta2) reads,
// newest first, as contract.GetCompatibleVersions("v1beta2") gives them.
var contracts = []string{"v1beta2", "v1beta1"}

type discovery struct {
	m  *kube.Client
	ns string
}

// discover builds the tree under the Cluster cl.
func discover(ctx context.Context, m *kube.Client, cl *unstructured.Unstructured) (*Node, error) {
	d := &discovery{m: m, ns: cl.GetNamespace()}
	root := node(cl, "")

	if infra, err := d.follow(ctx, cl, "spec", "infrastructureRef"); err != nil {
		return nil, err
	} else if infra != nil {
		root.Children = append(root.Children, node(infra, "ClusterInfrastructure"))
	}
	// The LibvirtClusters of pools on KVM hosts: the Cluster does not
	// reference them, so clusterctl's tree would not show them, yet their
	// hosts answering is what those pools wait on.
	pools, err := poolInfrastructure(ctx, m, cl)
	if err != nil {
		return nil, err
	}
	root.Children = append(root.Children, pools...)

	sel := clusterapi.ClusterNameLabel + "=" + cl.GetName()
	machines, err := m.List(ctx, clusterapi.MachineGVK, d.ns, sel)
	if err != nil {
		return nil, err
	}
	sortByName(machines)
	placed := map[string]bool{}
	var cpMachines []*unstructured.Unstructured
	for i := range machines {
		if _, ok := machines[i].GetLabels()["cluster.x-k8s.io/control-plane"]; ok {
			cpMachines = append(cpMachines, &machines[i])
		}
	}

	cp, err := d.follow(ctx, cl, "spec", "controlPlaneRef")
	if err != nil {
		return nil, err
	}
	if cp != nil {
		n := node(cp, "ControlPlane")
		for _, mc := range cpMachines {
			placed[mc.GetName()] = true
			mn, err := d.machine(ctx, mc)
			if err != nil {
				return nil, err
			}
			n.Children = append(n.Children, mn)
		}
		root.Children = append(root.Children, n)
	}

	mds, err := m.List(ctx, clusterapi.MachineDeploymentGVK, d.ns, sel)
	if err != nil {
		return nil, err
	}
	sets, err := m.List(ctx, clusterapi.MachineSetGVK, d.ns, sel)
	if err != nil {
		return nil, err
	}
	sortByName(mds)
	workers := &Node{Kind: "Workers"}
	for i := range mds {
		md := &mds[i]
		n := node(md, "")
		for j := range sets {
			if !controlledBy(&sets[j], md) {
				continue
			}
			for k := range machines {
				if controlledBy(&machines[k], &sets[j]) {
					placed[machines[k].GetName()] = true
					mn, err := d.machine(ctx, &machines[k])
					if err != nil {
						return nil, err
					}
					n.Children = append(n.Children, mn)
				}
			}
		}
		sort.SliceStable(n.Children, func(a, b int) bool { return n.Children[a].Name < n.Children[b].Name })
		workers.Children = append(workers.Children, n)
	}
	other := &Node{Kind: "Other"}
	for i := range machines {
		if !placed[machines[i].GetName()] {
			mn, err := d.machine(ctx, &machines[i])
			if err != nil {
				return nil, err
			}
			other.Children = append(other.Children, mn)
		}
	}
	if len(other.Children) > 0 {
		workers.Children = append(workers.Children, other)
	}
	if len(workers.Children) > 0 {
		root.Children = append(root.Children, workers)
	}
	return root, nil
}

// machine is a Machine's node with its infrastructure machine and bootstrap
// config beneath it, where they exist.
func (d *discovery) machine(ctx context.Context, mc *unstructured.Unstructured) (*Node, error) {
	n := node(mc, "")
	for _, ref := range []struct{ role, field string }{{"MachineInfrastructure", "infrastructureRef"}, {"BootstrapConfig", "bootstrap"}} {
		path := []string{"spec", ref.field}
		if ref.field == "bootstrap" {
			path = append(path, "configRef")
		}
		o, err := d.follow(ctx, mc, path...)
		if err != nil {
			return nil, err
		}
		if o != nil {
			n.Children = append(n.Children, node(o, ref.role))
		}
	}
	return n, nil
}

// follow reads the object a contract-versioned reference ({apiGroup, kind,
// name}) at path of obj points to, in the version its CRD's contract label
// names, as CAPI's external.GetObjectFromContractVersionedRef does. nil when
// the reference is unset, or its kind or object is missing (clusterctl then
// leaves the node out too).
func (d *discovery) follow(ctx context.Context, obj *unstructured.Unstructured, path ...string) (*unstructured.Unstructured, error) {
	ref, found, _ := unstructured.NestedStringMap(obj.Object, path...)
	if !found || ref["kind"] == "" || ref["name"] == "" {
		return nil, nil
	}
	gk := schema.GroupKind{Group: ref["apiGroup"], Kind: ref["kind"]}
	v, err := d.contractVersion(ctx, gk)
	if err != nil || v == "" {
		return nil, err
	}
	o, found, err := d.m.Get(ctx, kube.Ref{GVK: gk.WithVersion(v), Namespace: d.ns, Name: ref["name"]})
	if err != nil || !found {
		return nil, err
	}
	return o, nil
}

// contractVersion is the newest API version of gk that its CRD labels for
// the newest contract labctl reads; "" when its CRD is missing or carries
// no contract label.
func (d *discovery) contractVersion(ctx context.Context, gk schema.GroupKind) (string, error) {
	plural, ok, err := d.m.Plural(gk)
	if err != nil || !ok {
		return "", err
	}
	crd, found, err := d.m.Get(ctx, kube.Ref{GVK: kube.CRDGVK, Name: plural + "." + gk.Group})
	if err != nil || !found {
		return "", err
	}
	labels := crd.GetLabels()
	for _, c := range contracts {
		if vs := labels[contractLabelPrefix+c]; vs != "" {
			versions := strings.Split(vs, "_")
			sort.Slice(versions, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(versions[i], versions[j]) > 0 })
			return versions[0], nil
		}
	}
	return "", nil
}

// poolInfrastructure are the nodes of the LibvirtClusters labctl made for
// cluster cl's pools, but for the one cl's infrastructureRef names.
func poolInfrastructure(ctx context.Context, m *kube.Client, cl *unstructured.Unstructured) ([]*Node, error) {
	served, err := m.Serves(clusterapi.LibvirtClusterGVK)
	if err != nil || !served {
		return nil, err
	}
	lcs, err := m.List(ctx, clusterapi.LibvirtClusterGVK, cl.GetNamespace(), labctlSelector(cl.GetName()))
	if err != nil {
		return nil, err
	}
	sortByName(lcs)
	own, _, _ := unstructured.NestedString(cl.Object, "spec", "infrastructureRef", "name")
	kind, _, _ := unstructured.NestedString(cl.Object, "spec", "infrastructureRef", "kind")
	var out []*Node
	for i := range lcs {
		lc := &lcs[i]
		if kind == clusterapi.LibvirtClusterGVK.Kind && lc.GetName() == own {
			continue
		}
		n := node(lc, "PoolInfrastructure")
		hosts, _, _ := unstructured.NestedSlice(lc.Object, "spec", "hosts")
		var names []string
		for _, h := range hosts {
			if hm, ok := h.(map[string]any); ok {
				name, _ := hm["name"].(string)
				names = append(names, name)
			}
		}
		n.Details = fmt.Sprintf("%d hosts: %s", len(names), strings.Join(names, ", "))
		out = append(out, n)
	}
	return out, nil
}

// controlledBy reports whether owner is obj's controller, compared as CAPI's
// util.IsControlledBy compares: API group, kind and name.
func controlledBy(obj, owner *unstructured.Unstructured) bool {
	for _, r := range obj.GetOwnerReferences() {
		if r.Controller == nil || !*r.Controller {
			continue
		}
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil {
			return false
		}
		return gv.Group == owner.GroupVersionKind().Group && r.Kind == owner.GetKind() && r.Name == owner.GetName()
	}
	return false
}

func sortByName(objs []unstructured.Unstructured) {
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].GetName() < objs[j].GetName() })
}
