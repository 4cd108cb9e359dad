package orphans_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/orphans"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/ui"
)

const (
	ownedUUID   = "6f1c2a3b-0000-4000-8000-000000000001"
	goneUUID    = "6f1c2a3b-0000-4000-8000-000000000002"
	stoppedUUID = "6f1c2a3b-0000-4000-8000-000000000003"
)

// kvmLab is lab home with one libvirt host, kvm1, on the test's libvirtd
// (its test driver), and cluster lab1 with a pool there.
func kvmLab(d *libvirttest.Daemon) *config.Lab {
	return &config.Lab{
		Metadata: config.Metadata{Name: "home"},
		Hypervisors: []config.Hypervisor{{Name: "kvm1", Libvirt: &config.Libvirt{
			URI: d.URI(), StoragePool: "gcpool", Network: "gcnet",
		}}},
		Network:    config.Network{CIDR: "10.213.0.0/24", Gateway: "10.213.0.1"},
		Management: config.Management{Hypervisor: "kvm1", Name: "labctl-mgmt"},
		Images:     []config.Image{{Name: "noble", Hypervisor: "kvm1", Hosts: []string{"kvm1"}, KubernetesVersion: "v1.35.4"}},
		Clusters: []config.Cluster{{Name: "lab1", Hypervisor: "kvm1",
			Pools: []config.Pool{{Name: "kvm", Hypervisors: []string{"kvm1"}, Max: 3}}}},
	}
}

func libvirtOpener(lab *config.Lab) orphans.DriverFunc {
	return func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) }
}

// raw connects to the test driver the way labctl's driver does, to make
// what labctl and its provider would have left there.
func raw(t *testing.T, d *libvirttest.Daemon) *lv.Libvirt {
	t.Helper()
	conn, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	l := lv.NewWithDialer(dialers.NewAlreadyConnected(conn))
	if err := l.ConnectToURI("test:///default"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Disconnect() })
	return l
}

// labctlDomain defines a domain with labctl's metadata element.
func labctlDomain(t *testing.T, l *lv.Libvirt, name, uuid, lab string, running bool, tags []string, vols ...string) {
	t.Helper()
	var meta strings.Builder
	fmt.Fprintf(&meta, `<labctl:vm xmlns:labctl=%q lab=%q>`, libvirt.MetadataNS, lab)
	for _, tag := range tags {
		fmt.Fprintf(&meta, "<labctl:tag>%s</labctl:tag>", tag)
	}
	for _, v := range vols {
		fmt.Fprintf(&meta, "<labctl:volume>%s</labctl:volume>", v)
	}
	meta.WriteString("</labctl:vm>")
	uuidXML := ""
	if uuid != "" {
		uuidXML = "<uuid>" + uuid + "</uuid>"
	}
	x := fmt.Sprintf(`<domain type='test'><name>%s</name>%s<memory unit='MiB'>2048</memory><vcpu>2</vcpu><os><type>hvm</type></os><metadata>%s</metadata></domain>`,
		name, uuidXML, meta.String())
	dom, err := l.DomainDefineXML(x)
	if err != nil {
		t.Fatalf("defining %s: %v", name, err)
	}
	if running {
		if err := l.DomainCreate(dom); err != nil {
			t.Fatal(err)
		}
	}
}

func volumes(t *testing.T, l *lv.Libvirt, pool lv.StoragePool, names ...string) {
	t.Helper()
	for _, n := range names {
		x := fmt.Sprintf(`<volume><name>%s</name><capacity unit='MiB'>16</capacity><target><format type='qcow2'/></target></volume>`, n)
		if _, err := l.StorageVolCreateXML(pool, x, 0); err != nil {
			t.Fatalf("creating volume %s: %v", n, err)
		}
	}
}

// nodeImages uploads node images as 'labctl image build' leaves them:
// the volume and its verified-upload marker.
func nodeImages(t *testing.T, l *lv.Libvirt, pool lv.StoragePool, names ...string) {
	t.Helper()
	for _, n := range names {
		volumes(t, l, pool, n, n+".sha256-"+strings.Repeat("ab", 32))
	}
}

// overlay makes a VM disk as the driver's createOverlay does: a qcow2
// volume backed by the image volume's path.
func overlay(t *testing.T, l *lv.Libvirt, pool lv.StoragePool, name, image string) {
	t.Helper()
	img, err := l.StorageVolLookupByName(pool, image)
	if err != nil {
		t.Fatal(err)
	}
	path, err := l.StorageVolGetPath(img)
	if err != nil {
		t.Fatal(err)
	}
	x := fmt.Sprintf(`<volume><name>%s</name><capacity unit='GiB'>20</capacity><target><format type='qcow2'/></target>`+
		`<backingStore><path>%s</path><format type='qcow2'/></backingStore></volume>`, name, path)
	if _, err := l.StorageVolCreateXML(pool, x, 0); err != nil {
		t.Fatalf("creating volume %s: %v", name, err)
	}
}

// libvirtState puts on kvm1 what a lab that ran a while holds.
func libvirtState(t *testing.T, l *lv.Libvirt) {
	pool, err := l.StoragePoolDefineXML(`<pool type='dir'><name>gcpool</name><target><path>/gc-pool</path></target></pool>`, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.StoragePoolCreate(pool, 0); err != nil {
		t.Fatal(err)
	}
	node := func(cluster string) []string { return []string{"labctl", "labctl-lab-" + cluster, "cluster-api"} }
	labctlDomain(t, l, "labctl-mgmt", "", "home", true, []string{"labctl", "labctl-lab-home"}, "labctl-mgmt-disk0.qcow2", "labctl-mgmt-seed.iso")
	labctlDomain(t, l, "labctl-mgmt-old", "", "home", false, []string{"labctl", "labctl-lab-home"})
	labctlDomain(t, l, "lab1-kvm-owned", ownedUUID, "lab1/lab1", true, node("lab1/lab1"), "lab1-kvm-owned-disk0.qcow2", "lab1-kvm-owned-seed.iso")
	labctlDomain(t, l, "lab1-kvm-gone", goneUUID, "lab1/lab1", true, node("lab1/lab1"), "lab1-kvm-gone-disk0.qcow2")
	labctlDomain(t, l, "lab1-kvm-stopped", stoppedUUID, "lab1/lab1", false, node("lab1/lab1"))
	labctlDomain(t, l, "lab1-kvm-new", "", "lab1/lab1", false, node("lab1/lab1")) // its LibvirtMachine has no providerID yet
	labctlDomain(t, l, "other-kvm-x", "", "other/other", false, node("other/other"))
	// Node images of lab.yaml's image noble, each with its marker: the
	// newest, which the LibvirtMachines name; one a LibvirtMachineTemplate
	// names; one a running node's disk is still an overlay on (made
	// before the roll to v1.35.4); and an old one nothing uses.
	nodeImages(t, l, pool, "noble-v1.35.4.qcow2", "noble-v1.35.1.qcow2", "noble-v1.35.3.qcow2", "noble-v1.35.2.qcow2",
		"jammy-v1.30.0.qcow2") // an image lab.yaml does not have (another lab's, or one removed from lab.yaml)
	volumes(t, l, pool, "noble-v1.35.0.qcow2") // no marker: not an upload labctl finished
	overlay(t, l, pool, "lab1-kvm-owned-disk0.qcow2", "noble-v1.35.3.qcow2")
	volumes(t, l, pool, "labctl-mgmt-disk0.qcow2", "labctl-mgmt-seed.iso", "lab1-kvm-owned-seed.iso",
		"lab1-kvm-gone-disk0.qcow2",
		"lost-disk0.qcow2", "lost-seed.iso", // a create cut off before its domain was defined
		"lab1-kvm-creating-disk0.qcow2") // a create under way: its LibvirtMachine exists
}

// nodeImageVolumes are the node image volumes and markers gc keeps.
var nodeImageVolumes = []string{"noble-v1.35.4.qcow2", "noble-v1.35.1.qcow2", "noble-v1.35.3.qcow2",
	"jammy-v1.30.0.qcow2", "noble-v1.35.0.qcow2"}

func libvirtMachine(name, providerID string) *unstructured.Unstructured {
	spec := map[string]any{"cpus": int64(2), "memoryMiB": int64(2048), "diskGiB": int64(20),
		"image": map[string]any{"pool": "gcpool", "volume": "noble-v1.35.4.qcow2"}}
	if providerID != "" {
		spec["providerID"] = providerID
	}
	return obj(clusterapi.LibvirtMachineGVK.GroupVersion().String(), "LibvirtMachine", "lab1", name, spec)
}

func TestFindAndDeleteOnLibvirt(t *testing.T) {
	d := libvirttest.Start(t)
	lab := kvmLab(d)
	l := raw(t, d)
	libvirtState(t, l)

	findExactly(t, "without a management cluster", orphans.Input{Lab: lab, Driver: libvirtOpener(lab)},
		"seed-iso lost-seed.iso",
		"vm labctl-mgmt-old",
		"volume lab1-kvm-creating-disk0.qcow2",
		"volume lost-disk0.qcow2")

	kc := mgmtWith(t, libvirtMachine("lab1-kvm-owned", "libvirt://kvm1/"+ownedUUID), libvirtMachine("lab1-kvm-new", ""),
		libvirtMachine("lab1-kvm-creating", ""),
		obj(clusterapi.LibvirtMachineTemplateGVK.GroupVersion().String(), "LibvirtMachineTemplate", "lab1", "lab1-old",
			map[string]any{"template": map[string]any{"spec": map[string]any{"cpus": int64(2), "memoryMiB": int64(2048), "diskGiB": int64(20),
				"image": map[string]any{"pool": "gcpool", "volume": "noble-v1.35.1.qcow2"}}}}))
	got := findExactly(t, "with a management cluster", orphans.Input{Lab: lab, Driver: libvirtOpener(lab), Mgmt: kc},
		"image noble-v1.35.2.qcow2",
		"seed-iso lost-seed.iso",
		"vm lab1-kvm-gone",
		"vm lab1-kvm-stopped",
		"vm labctl-mgmt-old",
		"volume lost-disk0.qcow2")
	if o := got[0]; o.Reason != "node image of image noble (kubernetes v1.35.2) 'labctl image build' uploaded; no disk is an overlay on it, "+
		"no LibvirtMachine, LibvirtMachineTemplate or cluster in lab.yaml uses it, and noble-v1.35.4.qcow2 is newer (16 MiB)" {
		t.Errorf("the old node image: %+v", o)
	}
	if o := got[2]; !o.Running || o.MemoryMiB != 2048 || o.Node != "" || o.ID != 0 ||
		o.Reason != "KVM node of cluster lab1/lab1 (lab home's), domain UUID "+goneUUID+", no LibvirtMachine names it; running, 2048 MiB" {
		t.Errorf("the running node: %+v", o)
	}

	// gc --yes keeps the running one; --force deletes it too; a re-run
	// finds nothing, and what is owned is all there.
	gc := func(force bool) string {
		io, _, out, errb := ui.Test()
		err := orphans.GC(t.Context(), orphans.Options{IO: io, Lab: lab,
			Driver: libvirtOpener(lab), Mgmt: staticMgmt(kc), Yes: true, Force: force})
		if err != nil {
			t.Fatalf("gc: %v\n%s", err, errb.String())
		}
		return out.String() + errb.String()
	}
	if s := gc(false); !strings.Contains(s, "kept vm lab1-kvm-gone on kvm1: it runs; pass --force") {
		t.Errorf("gc --yes:\n%s", s)
	}
	gc(true)
	if s := gc(false); !strings.Contains(s, "no orphans") {
		t.Errorf("the re-run:\n%s", s)
	}
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, dom := range doms {
		names = append(names, dom.Name)
	}
	// "test" is the test driver's own domain.
	if !sameSet(names, "labctl-mgmt", "lab1-kvm-owned", "lab1-kvm-new", "other-kvm-x", "test") {
		t.Errorf("domains after gc: %v", names)
	}
	pool, err := l.StoragePoolLookupByName("gcpool")
	if err != nil {
		t.Fatal(err)
	}
	vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var vnames []string
	for _, v := range vols {
		vnames = append(vnames, v.Name)
	}
	var markers []string
	for _, n := range nodeImageVolumes[:4] {
		markers = append(markers, n+".sha256-"+strings.Repeat("ab", 32))
	}
	if !sameSet(vnames, append(append([]string{"labctl-mgmt-disk0.qcow2", "labctl-mgmt-seed.iso", "lab1-kvm-owned-disk0.qcow2", "lab1-kvm-owned-seed.iso",
		"lab1-kvm-creating-disk0.qcow2"}, nodeImageVolumes...), markers...)...) {
		t.Errorf("volumes after gc: %v", vnames)
	}
}

func staticMgmt(kc *kube.Client) func(context.Context) (*kube.Client, error) {
	return func(context.Context) (*kube.Client, error) { return kc, nil }
}

func sameSet(have []string, want ...string) bool {
	if len(have) != len(want) {
		return false
	}
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}
