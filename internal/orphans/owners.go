package orphans

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/kube"
	libvirtv1 "github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// owners is what the management cluster's objects name: the only record
// of which node VMs and templates are in use.
type owners struct {
	present bool
	// vmids are the VMIDs ProxmoxMachines name (spec.virtualMachineID).
	vmids map[int]string
	// uuids are the domain UUIDs LibvirtMachines name: their UID, which a
	// new domain gets, and the UUID in spec.providerID, which a restored
	// one keeps (docs/day2.md).
	uuids map[string]string
	// names are the infrastructure machines' names: CAPMOX names its
	// clone after the ProxmoxMachine before it records the VMID, and a
	// LibvirtMachine's domain carries its name.
	names map[string]string
	// clusters are the Clusters, as "<namespace>/<name>".
	clusters map[string]bool
	// templateIDs and selectors are what ProxmoxMachines and
	// ProxmoxMachineTemplates clone from.
	templateIDs map[int]string
	selectors   [][]string
	// images are the node image volumes LibvirtMachines and
	// LibvirtMachineTemplates boot from, as "<pool>/<volume>".
	images map[string]string
}

func readOwners(ctx context.Context, mc *kube.Client) (*owners, error) {
	o := &owners{vmids: map[int]string{}, uuids: map[string]string{}, names: map[string]string{},
		clusters: map[string]bool{}, templateIDs: map[int]string{}, images: map[string]string{}}
	if mc == nil {
		return o, nil
	}
	o.present = true
	list := func(gvk schema.GroupVersionKind, each func(u *unstructured.Unstructured, by string)) error {
		served, err := mc.Serves(gvk)
		if err != nil {
			return fmt.Errorf("asking the management cluster %s whether it serves %s: %w", mc.Host(), gvk.Kind, err)
		}
		if !served {
			return nil
		}
		objs, err := mc.List(ctx, gvk, "", "")
		if err != nil {
			return fmt.Errorf("listing the %ss of the management cluster %s: %w", gvk.Kind, mc.Host(), err)
		}
		for i := range objs {
			each(&objs[i], gvk.Kind+" "+objs[i].GetNamespace()+"/"+objs[i].GetName())
		}
		return nil
	}
	template := func(u *unstructured.Unstructured, by string, fields ...string) {
		if id, ok, _ := unstructured.NestedInt64(u.Object, append(fields, "templateID")...); ok && id > 0 {
			o.templateIDs[int(id)] = by
		}
		if tags, ok, _ := unstructured.NestedStringSlice(u.Object, append(fields, "templateSelector", "matchTags")...); ok && len(tags) > 0 {
			o.selectors = append(o.selectors, tags)
		}
	}
	for _, step := range []struct {
		gvk  schema.GroupVersionKind
		each func(u *unstructured.Unstructured, by string)
	}{
		{clusterapi.ClusterGVK, func(u *unstructured.Unstructured, _ string) {
			o.clusters[u.GetNamespace()+"/"+u.GetName()] = true
		}},
		{clusterapi.ProxmoxMachineGVK, func(u *unstructured.Unstructured, by string) {
			if id, ok, _ := unstructured.NestedInt64(u.Object, "spec", "virtualMachineID"); ok && id > 0 {
				o.vmids[int(id)] = by
			}
			o.names[u.GetName()] = by
			template(u, by, "spec")
		}},
		{clusterapi.ProxmoxMachineTemplateGVK, func(u *unstructured.Unstructured, by string) {
			template(u, by, "spec", "template", "spec")
		}},
		{clusterapi.LibvirtMachineGVK, func(u *unstructured.Unstructured, by string) {
			// Both: a domain a create cut short may have the UID's UUID
			// while the providerID is not recorded yet.
			o.uuids[strings.ToLower(string(u.GetUID()))] = by
			id, _, _ := unstructured.NestedString(u.Object, "spec", "providerID")
			o.uuids[strings.ToLower(libvirtv1.DomainUUID(id, u.GetUID()))] = by
			o.names[u.GetName()] = by
			o.image(u, by, "spec", "image")
		}},
		{clusterapi.LibvirtMachineTemplateGVK, func(u *unstructured.Unstructured, by string) {
			o.image(u, by, "spec", "template", "spec", "image")
		}},
	} {
		if err := list(step.gvk, step.each); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// image records the node image volume an object's fields name.
func (o *owners) image(u *unstructured.Unstructured, by string, fields ...string) {
	pool, _, _ := unstructured.NestedString(u.Object, append(fields, "pool")...)
	vol, _, _ := unstructured.NestedString(u.Object, append(fields, "volume")...)
	if vol != "" {
		o.images[pool+"/"+vol] = by
	}
}
