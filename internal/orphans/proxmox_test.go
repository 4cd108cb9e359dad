package orphans_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/orphans"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
)

const seedHash = "0123456789ab"

// pveLab is lab home with the Proxmox hypervisor pve on srv, vmidRange
// 200-299, image noble built there, cluster lab1 on it.
func pveLab(t *testing.T, srv *pvetest.Server) *config.Lab {
	t.Setenv("PVE_TOKEN_SECRET", srv.Secret)
	return &config.Lab{
		Metadata: config.Metadata{Name: "home"},
		Hypervisors: []config.Hypervisor{{Name: "pve", Proxmox: &config.Proxmox{
			URL: srv.URL, TokenID: srv.TokenID, TokenSecret: config.SecretRef{Env: "PVE_TOKEN_SECRET"},
			TLS:       config.TLS{Fingerprint: proxmox.Fingerprint(srv.Certificate())},
			Nodes:     []config.PVENode{{Name: "pv1-1", Storage: "local-lvm", ImageStorage: "local", Bridge: "vmbr0"}},
			VMIDRange: &config.VMIDRange{Start: 200, End: 299},
		}}},
		Management: config.Management{Hypervisor: "pve", Node: "pv1-1", Name: "labctl-mgmt", VMID: 100},
		Images:     []config.Image{{Name: "noble", Hypervisor: "pve", Node: "pv1-1", KubernetesVersion: "v1.35.4"}},
		Clusters: []config.Cluster{{Name: "lab1", Hypervisor: "pve", Template: config.Template{Image: "noble"},
			Pools: []config.Pool{{Name: "workers", Hypervisors: []string{"pve"}, Max: 3}}}},
	}
}

func pveOpener(lab *config.Lab) orphans.DriverFunc {
	return func(_ context.Context, name string) (hypervisor.Driver, error) {
		h, err := lab.Hypervisor(name)
		if err != nil {
			return nil, err
		}
		o, err := drivers.ProxmoxOptions(h)
		if err != nil {
			return nil, err
		}
		o.Timeout, o.Backoff, o.MaxBackoff = 2*time.Second, 5*time.Millisecond, 20*time.Millisecond
		return proxmox.New(o)
	}
}

// nodeTags are the tags a CAPMOX clone of noble's template carries.
var nodeTags = []string{"labctl", "labctl-image-noble", "kubernetes-v1.35.4"}

// proxmoxState puts on the fake PVE what a lab that ran a while holds:
// what is the lab's and owned, what is the lab's and orphaned, and what
// is another lab's or not labctl's at all.
func proxmoxState(srv *pvetest.Server) {
	mgmt := srv.AddVM("pv1-1", 100, "labctl-mgmt", 8192, true, false, "labctl", "labctl-lab-home")
	mgmt.Config["ide3"] = "local:iso/labctl-home-labctl-mgmt-" + seedHash + ".iso,media=cdrom"
	srv.AddVolume("pv1-1", "local", "local:iso/labctl-home-labctl-mgmt-"+seedHash+".iso", "iso", 0, 1<<20)
	srv.AddVM("pv1-1", 101, "labctl-mgmt-old", 4096, false, false, "labctl", "labctl-lab-home") // orphan: not the management VM
	srv.AddTemplate("pv1-1", 9000, "noble-v1.35.4", nodeTags...)
	srv.AddTemplate("pv1-1", 9001, "noble-v1.34.0", "labctl", "labctl-image-noble", "kubernetes-v1.34.0") // orphan with mgmt
	srv.AddTemplate("pv1-1", 9002, "other-v1.30.0", "labctl", "labctl-image-other", "kubernetes-v1.30.0") // another lab's image
	srv.AddVM("pv1-1", 205, "lab1-workers-owned", 2048, true, false, nodeTags...)
	srv.AddVM("pv1-1", 206, "lab1-workers-stopped", 2048, false, false, nodeTags...) // orphan with mgmt
	srv.AddVM("pv1-1", 207, "lab1-workers-running", 2048, true, false, nodeTags...)  // orphan with mgmt
	srv.AddVM("pv1-1", 208, "lab1-workers-cloning", 2048, false, false, nodeTags...) // named by a ProxmoxMachine without VMID yet
	srv.AddVM("pv1-1", 350, "outside-range", 2048, false, false, nodeTags...)
	srv.AddVM("pv1-1", 209, "other-mgmt", 2048, false, false, "labctl", "labctl-lab-other")
	srv.AddVM("pv1-1", 210, "hand-made", 2048, false, false)
	srv.AddVolume("pv1-1", "local", "local:iso/labctl-home-gone-"+seedHash+".iso", "iso", 0, 1<<20) // orphan
	srv.AddVolume("pv1-1", "local", "local:iso/labctl-other-x-"+seedHash+".iso", "iso", 0, 1<<20)   // another lab's
	srv.AddVolume("pv1-1", "local", "local:iso/ubuntu-24.04.iso", "iso", 0, 1<<20)                  // not labctl's
	srv.AddVolume("pv1-1", "local-lvm", "local-lvm:vm-211-disk-0", "images", 211, 4<<30)            // orphan: VMID 211 has no VM
	srv.AddVolume("pv1-1", "local-lvm", "local-lvm:vm-205-disk-0", "images", 205, 4<<30)            // VM 205's
	srv.AddVolume("pv1-1", "local-lvm", "local-lvm:vm-400-disk-0", "images", 400, 4<<30)            // outside the range
}

// mgmtWith starts a real API server with Cluster API's, CAPMOX's and
// the libvirt provider's CRDs, holding lab1 and objs.
func mgmtWith(t *testing.T, objs ...*unstructured.Unstructured) *kube.Client {
	t.Helper()
	env := testbed.Start(t, testbed.WithCRDs("capi", "capmox"), testbed.WithCRDPaths("../../embedded/provider/libvirt/crds"))
	kc := kube.NewForConfig(env.Config, env.Kubeconfig)
	ns := obj("v1", "Namespace", "", "lab1", nil)
	cluster := obj("cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1", map[string]any{"paused": true})
	if _, err := kc.Apply(t.Context(), append([]*unstructured.Unstructured{ns, cluster}, objs...), kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying the management cluster's objects: %v", err)
	}
	return kc
}

func obj(apiVersion, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
	u.SetNamespace(ns)
	u.SetName(name)
	if spec != nil {
		u.Object["spec"] = spec
	}
	if ns != "" {
		u.SetLabels(map[string]string{clusterapi.ClusterNameLabel: "lab1"})
	}
	return u
}

func proxmoxMachine(name string, vmid int) *unstructured.Unstructured {
	spec := map[string]any{"sourceNode": "pv1-1", "templateID": int64(9000),
		"network": map[string]any{"networkDevices": []any{map[string]any{"name": "net0", "bridge": "vmbr0", "model": "virtio"}}}}
	if vmid != 0 {
		spec["virtualMachineID"] = int64(vmid)
	}
	return obj(clusterapi.ProxmoxMachineGVK.GroupVersion().String(), "ProxmoxMachine", "lab1", name, spec)
}

// list is "kind name" of each orphan.
func list(os []orphans.Orphan) string {
	var lines []string
	for _, o := range os {
		lines = append(lines, o.Kind+" "+o.Name)
	}
	return strings.Join(lines, "\n")
}

// findExactly runs Find and fails unless it returns exactly want ("kind
// name" each, in Find's order).
func findExactly(t *testing.T, what string, in orphans.Input, want ...string) []orphans.Orphan {
	t.Helper()
	got, err := orphans.Find(t.Context(), in)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if list(got) != strings.Join(want, "\n") {
		t.Fatalf("%s, orphans:\n%s\nwant:\n%s", what, list(got), strings.Join(want, "\n"))
	}
	return got
}

func TestFindOnProxmox(t *testing.T) {
	srv := pvetest.New(t)
	proxmoxState(srv)
	lab := pveLab(t, srv)

	t.Run("without a management cluster", func(t *testing.T) {
		// Only what labctl's own marks prove unowned: no node VM, no template.
		got := findExactly(t, "without a management cluster", orphans.Input{Lab: lab, Driver: pveOpener(lab)},
			"seed-iso local:iso/labctl-home-gone-"+seedHash+".iso",
			"vm labctl-mgmt-old",
			"volume local-lvm:vm-211-disk-0")
		if o := got[1]; o.ID != 101 || o.Node != "pv1-1" || o.Running || o.MemoryMiB != 4096 ||
			!strings.Contains(o.Reason, "not the management VM labctl-mgmt") || !strings.Contains(o.Reason, "stopped") {
			t.Errorf("the old management VM: %+v", o)
		}
	})

	t.Run("with a management cluster", func(t *testing.T) {
		kc := mgmtWith(t, proxmoxMachine("lab1-workers-owned", 205), proxmoxMachine("lab1-workers-cloning", 0))
		got := findExactly(t, "with a management cluster", orphans.Input{Lab: lab, Driver: pveOpener(lab), Mgmt: kc},
			"seed-iso local:iso/labctl-home-gone-"+seedHash+".iso",
			"template noble-v1.34.0",
			"vm lab1-workers-running",
			"vm lab1-workers-stopped",
			"vm labctl-mgmt-old",
			"volume local-lvm:vm-211-disk-0")
		byName := map[string]orphans.Orphan{}
		for _, o := range got {
			byName[o.Name] = o
		}
		if o := byName["lab1-workers-stopped"]; o.ID != 206 || o.Running || o.MemoryMiB != 2048 ||
			o.Reason != "tagged labctl-image-noble, VMID 206 in vmidRange 200-299, no ProxmoxMachine names it; stopped, CAPMOX still counts its 2048 MiB against node pv1-1" {
			t.Errorf("the stopped clone: %+v", o)
		}
		if o := byName["lab1-workers-running"]; !o.Running || !strings.Contains(o.Reason, "running") {
			t.Errorf("the running clone: %+v", o)
		}
		if o := byName["noble-v1.34.0"]; o.ID != 9001 || !strings.Contains(o.Reason, "noble-v1.35.4 (VMID 9000, kubernetes v1.35.4) is newer") {
			t.Errorf("the old template: %+v", o)
		}

		// gc --yes --force deletes exactly those; a re-run finds nothing.
		io, _, _, errb := ui.Test()
		err := orphans.GC(t.Context(), orphans.Options{IO: io, Lab: lab,
			Driver: pveOpener(lab), Mgmt: staticMgmt(kc), Yes: true, Force: true})
		if err != nil {
			t.Fatalf("gc: %v\n%s", err, errb.String())
		}
		var ids []int
		for _, v := range srv.VMs() {
			ids = append(ids, v.ID)
		}
		if want := []int{100, 205, 208, 209, 210, 350, 9000, 9002}; !slices.Equal(ids, want) {
			t.Errorf("VMs after gc: %v, want %v", ids, want)
		}
		for _, gone := range []string{"local:iso/labctl-home-gone-" + seedHash + ".iso", "local-lvm:vm-211-disk-0"} {
			st, _, _ := strings.Cut(gone, ":")
			if slices.Contains(srv.Volumes("pv1-1", st), gone) {
				t.Errorf("%s is still there after gc", gone)
			}
		}
		again, err := orphans.Find(t.Context(), orphans.Input{Lab: lab, Driver: pveOpener(lab), Mgmt: kc})
		if err != nil || len(again) != 0 {
			t.Errorf("after gc, Find = %s, %v", list(again), err)
		}
	})
}

// A hypervisor that does not answer is reported by its lab.yaml field,
// within the bound, while the others are read.
func TestFindDeadHost(t *testing.T) {
	srv := pvetest.New(t)
	proxmoxState(srv)
	lab := pveLab(t, srv)
	dead := pvetest.New(t)
	dead.HangRequests("GET", "/cluster/resources", 100)
	h := lab.Hypervisors[0]
	h.Name = "pve2"
	px := *h.Proxmox
	px.URL, px.TLS = dead.URL, config.TLS{Fingerprint: proxmox.Fingerprint(dead.Certificate())}
	h.Proxmox = &px
	t.Setenv("PVE_TOKEN_SECRET", srv.Secret) // both fakes take the same token
	lab.Hypervisors = append(lab.Hypervisors, h)

	began := time.Now()
	got, err := orphans.Find(t.Context(), orphans.Input{Lab: lab, Driver: pveOpener(lab), HostTimeout: 2 * time.Second})
	took := time.Since(began)
	var ue *orphans.UnreachableError
	if !errors.As(err, &ue) || len(ue.Hosts) != 1 || ue.Hosts[0].Hypervisor != "pve2" || ue.Hosts[0].Field != "hypervisors[pve2].proxmox.url" {
		t.Fatalf("err = %v, want pve2 unreachable", err)
	}
	if !strings.Contains(err.Error(), "no answer within 2s") {
		t.Errorf("err = %v", err)
	}
	if len(got) != 3 {
		t.Errorf("the answering host's orphans: %s", list(got))
	}
	if took > 8*time.Second {
		t.Errorf("Find took %s with a 2s bound per host", took)
	}
}
