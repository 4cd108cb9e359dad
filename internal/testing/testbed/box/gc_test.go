package box_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/orphans"
	"github.com/labctl/labctl/internal/ui"
)

// A delete that fails leaves a VM labctl gc finds, with the real Cluster
// API, kubeadm, IPAM and CAPMOX against the strict fake PVE. The
// machine's delete is CAPMOX's as a scale-down makes it
// (ProxmoxMachine reconcileDelete, v0.9.0 internal/service/vmservice/
// delete.go): CAPMOX posts status/stop and, without waiting for that
// task, DELETEs the VM. Here every stop task fails, as one does when
// qemu-server cannot take the VM's lock in time ("can't lock file
// '/var/lock/qemu-server/lock-<vmid>.conf' - got timeout"), so the VM
// keeps running and PVE refuses each destroy: "VM <vmid> is running -
// destroy failed" (qemu-server's destroy_vm checks it before it starts
// the task; CAPMOX #742 logs the same). While the ProxmoxMachine still
// names the VM, gc offers nothing. Once its finalizer is removed by hand
// (what a user does for a delete that hangs), gc --dry-run lists exactly
// that VM, gc --yes keeps it because it runs, and gc --yes --force
// removes it.
func TestGCFindsTheVMAFailedDeleteLeft(t *testing.T) {
	c := startCAPMOXBox(t)
	lab, fake, vm := c.lab, c.fake, c.vm
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	cl, err := client.New(c.b.Env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) }
	gc := func(dryRun, force bool) (string, []orphans.Orphan) {
		t.Helper()
		io, _, out, errb := ui.Test()
		err := orphans.GC(ctx, orphans.Options{IO: io, Lab: lab, Driver: open,
			Mgmt: func(context.Context) (*kube.Client, error) { return c.kc, nil }, DryRun: dryRun, Yes: true, Force: force})
		if err != nil {
			t.Fatalf("gc: %v\n%s", err, errb.String())
		}
		found, err := orphans.Find(ctx, orphans.Input{Lab: lab, Driver: open, Mgmt: c.kc})
		if err != nil {
			t.Fatal(err)
		}
		// A stray clone of CAPMOX's (capmoxBox.strays) is an orphan gc
		// rightly reports; this test is about the machine's VM.
		found = slices.DeleteFunc(found, func(o orphans.Orphan) bool {
			return o.Kind == orphans.KindVM && slices.Contains(c.strays, o.ID) && strings.Contains(o.Reason, "no ProxmoxMachine names it")
		})
		return out.String() + errb.String(), found
	}
	if s, found := gc(true, false); len(found) != 0 {
		t.Fatalf("with CAPMOX's VM %d named by its ProxmoxMachine, gc --dry-run offers:\n%s", vm.ID, s)
	}

	const lockTimeout = "can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout"
	fake.FailTasks("POST", "/nodes/{node}/qemu/{vmid}/status/stop", 1<<20, fmt.Sprintf(lockTimeout, vm.ID))
	pms, err := c.kc.List(ctx, clusterapi.ProxmoxMachineGVK, "lab1", "")
	if err != nil || len(pms) != 1 {
		t.Fatalf("ProxmoxMachines of lab1: %d, %v", len(pms), err)
	}
	pm := &pms[0]
	// What labctl cluster delete does first: the Cluster goes, and with it
	// every machine.
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(clusterapi.ClusterGVK)
	cluster.SetNamespace("lab1")
	cluster.SetName("lab1")
	if err := cl.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	refused := func() (bool, string) {
		n := 0
		for _, r := range fake.Requests() {
			// The fake answers 500 "VM <vmid> is running - destroy
			// failed" here, as PVE does.
			if r.Method == "DELETE" && r.Path == "/nodes/{node}/qemu/{vmid}" && r.Status == 500 && strings.Contains(r.Raw, fmt.Sprint(vm.ID)) {
				n++
			}
		}
		return n >= 2, fmt.Sprintf("%d refused destroys", n)
	}
	waitUntil(ctx, t, 3*time.Minute, "CAPMOX's destroy of VM refused twice", func() {}, refused)
	_, n := refused()
	t.Logf("CAPMOX's delete of VM %d: %s", vm.ID, n)
	if s, found := gc(true, false); len(found) != 0 {
		t.Fatalf("while CAPMOX still tries to delete VM %d, gc --dry-run offers:\n%s", vm.ID, s)
	}

	// The user gives up on the delete.
	u := pm.DeepCopy()
	if err := cl.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, 2*time.Minute, "the ProxmoxMachine gone", func() {}, func() (bool, string) {
		pms, err := c.kc.List(ctx, clusterapi.ProxmoxMachineGVK, "lab1", "")
		return err == nil && len(pms) == 0, fmt.Sprint(len(pms), err)
	})

	s, found := gc(true, false)
	t.Logf("gc --dry-run:\n%s", s)
	if len(found) != 1 || found[0].Kind != orphans.KindVM || found[0].ID != vm.ID || !found[0].Running || found[0].MemoryMiB == 0 {
		t.Fatalf("gc --dry-run lists %+v; want exactly VM %d, running", found, vm.ID)
	}
	r := lab.Hypervisors[0].Proxmox.VMIDRange
	want := fmt.Sprintf("tagged %s, VMID %d in vmidRange %d-%d, no ProxmoxMachine names it", hypervisor.ImageTag(lab.Images[0].Name), vm.ID, r.Start, r.End)
	if !strings.HasPrefix(found[0].Reason, want) || !strings.Contains(s, "kept without --force") {
		t.Errorf("gc --dry-run says:\n%s\nwant the reason %q", s, want)
	}

	// The lock is free again; gc --yes still keeps a running VM.
	fake.ClearFaults()
	if s, found = gc(false, false); len(found) != 1 || !strings.Contains(s, "pass --force to stop and delete it") {
		t.Fatalf("gc --yes without --force:\n%s", s)
	}
	if s, found = gc(false, true); len(found) != 0 {
		t.Fatalf("after gc --yes --force, orphans are left:\n%s", s)
	}
	t.Logf("gc --yes --force:\n%s", s)
	var ids []int
	for _, v := range fake.VMs() {
		ids = append(ids, v.ID)
	}
	if slices.Contains(ids, vm.ID) {
		t.Errorf("VM %d is still in the fake PVE: %v", vm.ID, ids)
	}
	for _, stray := range c.strays {
		if slices.Contains(ids, stray) {
			t.Errorf("CAPMOX's stray clone, VM %d, is still in the fake PVE after gc --yes --force: %v", stray, ids)
		}
	}
	for _, keep := range []int{lab.Management.VMID, 200, templateID} {
		if !slices.Contains(ids, keep) {
			t.Errorf("VM %d, not an orphan, is gone: %v", keep, ids)
		}
	}
}
