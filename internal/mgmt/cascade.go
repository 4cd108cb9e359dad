package mgmt

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	libvirtv1 "github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// machineVM is the VM one infrastructure machine of a workload cluster
// names: CAPMOX's by VMID, labctl's libvirt provider's by domain UUID
// (libvirtv1.DomainUUID: a restored machine's UID is not its domain's).
type machineVM struct {
	Machine string // "ProxmoxMachine lab1/lab1-workers-abc"
	VMID    int
	UUID    string
}

// machineVMs reads, before the clusters go, the VMs their infrastructure
// machines name, so that mgmt down --cascade can see on the hypervisors
// themselves that every one is gone. Kinds the management cluster does
// not serve have none.
func machineVMs(ctx context.Context, mc *kube.Client, clusters []kube.Ref) ([]machineVM, error) {
	var out []machineVM
	if len(clusters) == 0 {
		return nil, nil
	}
	for _, gvk := range []struct {
		gvk  schema.GroupVersionKind
		vmOf func(u *unstructured.Unstructured) machineVM
	}{
		{clusterapi.ProxmoxMachineGVK, func(u *unstructured.Unstructured) machineVM {
			id, _, _ := unstructured.NestedInt64(u.Object, "spec", "virtualMachineID")
			return machineVM{VMID: int(id)}
		}},
		{clusterapi.LibvirtMachineGVK, func(u *unstructured.Unstructured) machineVM {
			id, _, _ := unstructured.NestedString(u.Object, "spec", "providerID")
			return machineVM{UUID: libvirtv1.DomainUUID(id, u.GetUID())}
		}},
	} {
		served, err := mc.Serves(gvk.gvk)
		if err != nil {
			return nil, err
		}
		if !served {
			continue
		}
		for _, c := range clusters {
			objs, err := mc.List(ctx, gvk.gvk, c.Namespace, clusterapi.ClusterNameLabel+"="+c.Name)
			if err != nil {
				return nil, fmt.Errorf("listing the %ss of cluster %s: %w", gvk.gvk.Kind, c.Name, err)
			}
			for i := range objs {
				v := gvk.vmOf(&objs[i])
				if v.VMID == 0 && v.UUID == "" {
					continue // no VM made yet
				}
				v.Machine = gvk.gvk.Kind + " " + objs[i].GetNamespace() + "/" + objs[i].GetName()
				out = append(out, v)
			}
		}
	}
	return out, nil
}

// inventory is implemented by drivers that can list every VM, labctl's or
// not (Proxmox: CAPMOX's clones carry the template's tags, not the lab's).
type inventory interface {
	Inventory(ctx context.Context) ([]hypervisor.NodeCapacity, []hypervisor.VM, error)
}

// vmsLeft lists which of want are still on the lab's hypervisors.
func vmsLeft(ctx context.Context, lab *config.Lab, open DriverFunc, want []machineVM) ([]string, error) {
	var left []string
	for _, h := range lab.Hypervisors {
		if !slices.ContainsFunc(want, func(w machineVM) bool {
			return (w.VMID != 0 && h.Proxmox != nil) || (w.UUID != "" && h.Libvirt != nil)
		}) {
			continue
		}
		drv, err := open(ctx, h.Name)
		if err != nil {
			return nil, fmt.Errorf("checking that the workload clusters' VMs are gone from %s: %w", h.Name, err)
		}
		var vms []hypervisor.VM
		if inv, ok := drv.(inventory); ok {
			_, vms, err = inv.Inventory(ctx)
		} else {
			vms, err = drv.ListVMs(ctx, "")
		}
		_ = drivers.Close(drv)
		if err != nil {
			return nil, fmt.Errorf("checking that the workload clusters' VMs are gone from %s: %w", h.Name, err)
		}
		for _, w := range want {
			if slices.ContainsFunc(vms, func(v hypervisor.VM) bool {
				return (w.VMID != 0 && v.ID == w.VMID && h.Proxmox != nil) || (w.UUID != "" && strings.EqualFold(v.UUID, w.UUID))
			}) {
				left = append(left, fmt.Sprintf("%s on %s (of %s)", vmName(w), h.Name, w.Machine))
			}
		}
	}
	slices.Sort(left)
	return left, nil
}

func vmName(w machineVM) string {
	if w.VMID != 0 {
		return fmt.Sprintf("VM %d", w.VMID)
	}
	return "domain " + w.UUID
}

// waitVMsGone polls the hypervisors until none of want is left. Cluster
// API's Machines are gone by now, and the providers drop their finalizer
// only after the VM is deleted; this looks at the hypervisors themselves,
// so a provider that lost track of a VM does not go unnoticed.
func waitVMsGone(ctx context.Context, lab *config.Lab, open DriverFunc, want []machineVM, timeout time.Duration, report func(string)) error {
	if len(want) == 0 {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		left, err := vmsLeft(ctx, lab, open, want)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		report(fmt.Sprintf("%d VM(s) left: %s", len(left), strings.Join(left, ", ")))
		if time.Now().After(deadline) {
			return fmt.Errorf("the workload clusters are deleted, but after %s their VMs are still on the hypervisors: %s; the management VM was kept; delete these VMs (or run labctl gc), then run mgmt down again",
				timeout, strings.Join(left, ", "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the workload clusters' VMs to go: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}
