package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/orphans"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/ui"
)

// A scale-down whose delete the provider never finishes leaves a domain
// that labctl gc finds, with the real Cluster API and labctl's provider:
// the provider is killed between two of its libvirt calls (the kill
// test's machinery), after it stopped the domain and before it removed
// the first volume. While the LibvirtMachine still names the domain gc
// offers nothing; once its finalizer is removed by hand (what a user
// does for a delete that hangs), gc --dry-run lists exactly that domain,
// gc --yes removes it with its volumes, and the machine that stays is
// never offered.
func TestGCFindsTheDomainAKilledDeleteLeft(t *testing.T) {
	bd, kubeconfig := setupBed(t)
	lb := *bd
	lb.d = libvirttest.StartPrivate(t)
	lb.images = placeImage(t, lb.d)
	const ns = "gc"
	w := lb.newWorkload(t, ns, workloadSpec{pool: "gcw", addresses: []string{"10.213.0.60", "10.213.0.61"}, replicas: 0})
	lb.ipamSees(t, ns)
	lb.scale(t, w.md, 2)
	up := startChild(t, childConfig{Kubeconfig: kubeconfig, Namespace: ns})
	lms := lb.provisioned(t, ns, 2, 2*time.Minute, up)
	up.stop(t)

	mc, err := kube.Connect(bd.admin)
	if err != nil {
		t.Fatal(err)
	}
	lab := &config.Lab{
		Metadata: config.Metadata{Name: "home"},
		Hypervisors: []config.Hypervisor{{Name: "host-a", Libvirt: &config.Libvirt{
			URI: lb.d.URI(), StoragePool: imagePool, Network: "default",
		}}},
		Management: config.Management{Hypervisor: "host-a", Name: "labctl-mgmt"},
	}
	gc := func(dryRun bool) (string, []orphans.Orphan) {
		t.Helper()
		io, _, out, errb := ui.Test()
		err := orphans.GC(t.Context(), orphans.Options{IO: io, Lab: lab,
			Driver: func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) },
			Mgmt:   func(context.Context) (*kube.Client, error) { return mc, nil }, DryRun: dryRun, Yes: true})
		if err != nil {
			t.Fatalf("gc: %v\n%s", err, errb.String())
		}
		found, err := orphans.Find(t.Context(), orphans.Input{Lab: lab, Mgmt: mc,
			Driver: func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) }})
		if err != nil {
			t.Fatal(err)
		}
		return out.String() + errb.String(), found
	}
	if s, found := gc(true); len(found) != 0 {
		t.Fatalf("with both machines provisioned, gc --dry-run offers:\n%s", s)
	}

	// Scale down to 1: Cluster API marks one LibvirtMachine for deletion.
	lb.scale(t, w.md, 1)
	var victim v1alpha1.LibvirtMachine
	eventually(t, "a LibvirtMachine marked for deletion", time.Minute, func() (bool, string) {
		for _, lm := range lb.libvirtMachines(t, ns) {
			if !lm.DeletionTimestamp.IsZero() {
				victim = lm
				return true, ""
			}
		}
		return false, "none yet"
	})
	keep := lms[0].Name
	if keep == victim.Name {
		keep = lms[1].Name
	}
	killed := startChild(t, childConfig{Kubeconfig: kubeconfig, Namespace: ns, CutBefore: procStorageVolDelete})
	until(t, "the provider killed in the delete", 90*time.Second, killed, func() (bool, string) { return false, "" })
	if proc, cut := killed.cutAt(t); !cut || proc != procStorageVolDelete {
		t.Fatalf("the provider was not killed before deleting a volume (%d, %v)", proc, cut)
	}
	var dom hypervisor.VM
	for _, d := range lb.domains(t, ns) {
		if d.Name == victim.Name {
			dom = d
		}
	}
	if dom.Name == "" || dom.Running || dom.UUID != string(victim.UID) {
		t.Fatalf("the killed delete left domain %+v; want %s stopped, of UUID %s", dom, victim.Name, victim.UID)
	}
	// The LibvirtMachine still names it: not an orphan.
	if s, found := gc(true); len(found) != 0 {
		t.Fatalf("while its LibvirtMachine is being deleted, gc --dry-run offers:\n%s", s)
	}

	// The user gives up on the delete: the finalizer goes, and with it the
	// LibvirtMachine and the Machine.
	if err := bd.c.Get(t.Context(), client.ObjectKeyFromObject(&victim), &victim); err != nil {
		t.Fatal(err)
	}
	if err := bd.c.Patch(t.Context(), &victim, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the LibvirtMachine gone", time.Minute, func() (bool, string) {
		for _, lm := range lb.libvirtMachines(t, ns) {
			if lm.Name == victim.Name {
				return false, "still there"
			}
		}
		return true, ""
	})

	s, found := gc(true)
	if len(found) != 1 || found[0].Kind != orphans.KindVM || found[0].Name != victim.Name || found[0].Running {
		t.Fatalf("gc --dry-run lists:\n%s\nwant exactly the stopped domain %s", s, victim.Name)
	}
	want := fmt.Sprintf("KVM node of cluster %s/lab1 (lab home's), domain UUID %s, no LibvirtMachine names it", ns, victim.UID)
	if !strings.Contains(found[0].Reason, want) || !strings.Contains(s, "dry run: nothing was deleted") {
		t.Errorf("gc --dry-run says:\n%s\nwant the reason %q", s, want)
	}
	t.Logf("gc --dry-run:\n%s", s)

	if s, found = gc(false); len(found) != 0 {
		t.Fatalf("after gc --yes, orphans are left:\n%s", s)
	}
	t.Logf("gc --yes:\n%s", s)
	var names []string
	for _, d := range lb.domains(t, ns) {
		names = append(names, d.Name)
	}
	if len(names) != 1 || names[0] != keep {
		t.Errorf("domains after gc --yes: %v, want only %s", names, keep)
	}
	for _, v := range lb.volumes(t) {
		if strings.HasPrefix(v, victim.Name+"-") {
			t.Errorf("volume %s of the deleted domain is left", v)
		}
	}
	if s, found := gc(false); len(found) != 0 || !strings.Contains(s, "no orphans") {
		t.Errorf("the re-run:\n%s", s)
	}
}
