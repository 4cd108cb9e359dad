package libvirt

import (
	"net/netip"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/labctl/labctl/internal/hypervisor"
)

func TestNetworkXML(t *testing.T) {
	raw, err := networkXML(networkInput{Name: "labctl", Bridge: "lc-labctl", Subnet: netip.MustParsePrefix("10.213.0.0/24"), Gateway: netip.MustParseAddr("10.213.0.1"), LocalOnlyDNS: true})
	if err != nil {
		t.Fatal(err)
	}
	var n libvirtxml.Network
	if err := n.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	if n.Forward.Mode != "nat" || n.IPs[0].Prefix != 24 || n.IPs[0].DHCP.Ranges[0].Start != "10.213.0.128" {
		t.Errorf("network: %s", raw)
	}
	if n.DnsmasqOptions == nil || n.DnsmasqOptions.Option[0].Value != "no-resolv" || !strings.Contains(raw, "http://libvirt.org/schemas/network/dnsmasq/1.0") {
		t.Errorf("no-resolv missing: %s", raw)
	}
	plain, _ := networkXML(networkInput{Name: "labctl", Bridge: "lc-labctl", Subnet: netip.MustParsePrefix("10.213.0.0/24"), Gateway: netip.MustParseAddr("10.213.0.1")})
	if strings.Contains(plain, "no-resolv") {
		t.Errorf("a lab network must forward DNS (k3s downloads need it): %s", plain)
	}
	if _, err := networkXML(networkInput{Name: "x", Subnet: netip.MustParsePrefix("10.213.0.0/24"), Gateway: netip.MustParseAddr("10.9.0.1")}); err == nil {
		t.Error("gateway outside the subnet accepted")
	}
}

func TestUpperHalf(t *testing.T) {
	for _, tc := range []struct{ cidr, gw, first, last string }{
		{"10.213.0.0/24", "10.213.0.1", "10.213.0.128", "10.213.0.254"},
		{"10.213.0.0/24", "10.213.0.254", "10.213.0.128", "10.213.0.253"},
		{"10.213.0.0/24", "10.213.0.200", "10.213.0.201", "10.213.0.254"},
		{"192.168.4.0/23", "192.168.4.1", "192.168.5.0", "192.168.5.254"},
		{"10.0.0.0/29", "10.0.0.1", "10.0.0.4", "10.0.0.6"},
	} {
		f, l, err := upperHalf(netip.MustParsePrefix(tc.cidr), netip.MustParseAddr(tc.gw))
		if err != nil || f.String() != tc.first || l.String() != tc.last {
			t.Errorf("upperHalf(%s, %s) = %s-%s, %v; want %s-%s", tc.cidr, tc.gw, f, l, err, tc.first, tc.last)
		}
	}
	if _, _, err := upperHalf(netip.MustParsePrefix("10.0.0.0/30"), netip.MustParseAddr("10.0.0.1")); err == nil {
		t.Error("/30 accepted")
	}
}

func TestBridgeName(t *testing.T) {
	if got := bridgeName("labctl"); got != "lc-labctl" {
		t.Errorf("bridgeName = %q", got)
	}
	if got := bridgeName("a-very-long-network-name"); len(got) != 15 {
		t.Errorf("bridge name %q is not cut to 15 characters", got)
	}
}

func TestDomainXML(t *testing.T) {
	spec := hypervisor.VMSpec{Lab: "local", Name: "labctl-mgmt", CPUs: 2, MemoryMiB: 4096, DiskGiB: 20,
		Network: hypervisor.NetworkSpec{Bridge: "br0", MAC: "52:54:00:aa:bb:cc"}}
	raw, err := domainXML(domainInput{Spec: spec, Guest: guestProfile{Type: "qemu", Arch: "x86_64", Machine: "q35"}, Pool: "default",
		Disk: "labctl-mgmt-disk0.qcow2", Seed: "labctl-mgmt-seed.iso", ConsoleLog: "/var/log/x.log",
		Meta: vmMeta{Lab: "local", Tags: []string{"labctl"}, Volumes: []string{"a", "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	if d.Type != "qemu" || d.CPU.Mode != "maximum" || d.OS.Type.Machine != "q35" || d.VCPU.Value != 2 || d.Memory.Value != 4096 || d.Memory.Unit != "MiB" {
		t.Errorf("domain: %s", raw)
	}
	if d.Devices.Interfaces[0].Source.Bridge.Bridge != "br0" {
		t.Errorf("bridge NIC: %s", raw)
	}
	if len(d.Devices.Graphics) != 0 || d.Devices.Videos[0].Model.Type != "none" {
		t.Errorf("a headless VM has no graphics: %s", raw)
	}
	meta, err := parseMeta(d.Metadata.XML)
	if err != nil || meta.Lab != "local" || len(meta.Volumes) != 2 {
		t.Errorf("metadata round trip: %+v, %v (%s)", meta, err, d.Metadata.XML)
	}
	if !strings.Contains(d.Metadata.XML, MetadataNS) {
		t.Errorf("metadata has no labctl namespace: %s", d.Metadata.XML)
	}
	kvm, _ := domainXML(domainInput{Spec: spec, Guest: guestProfile{Type: "kvm", Arch: "x86_64", Machine: "q35"}, Pool: "p", Disk: "d", Seed: "s"})
	if !strings.Contains(kvm, "host-passthrough") {
		t.Errorf("kvm guests pass the host CPU through: %s", kvm)
	}
	spec.Network = hypervisor.NetworkSpec{}
	if _, err := domainXML(domainInput{Spec: spec, Guest: guestProfile{Type: "qemu"}}); err == nil {
		t.Error("a VM without network accepted")
	}
}

func capsXML(domains []string, features ...string) *libvirtxml.Caps {
	c := &libvirtxml.Caps{Host: libvirtxml.CapsHost{CPU: &libvirtxml.CapsHostCPU{}}}
	for _, f := range features {
		c.Host.CPU.FeatureFlags = append(c.Host.CPU.FeatureFlags, libvirtxml.CapsHostCPUFeatureFlag{Name: f})
	}
	g := libvirtxml.CapsGuest{OSType: "hvm", Arch: libvirtxml.CapsGuestArch{Name: "x86_64", Machines: []libvirtxml.CapsGuestMachine{{Name: "pc"}, {Name: "q35"}}}}
	for _, d := range domains {
		g.Arch.Domains = append(g.Arch.Domains, libvirtxml.CapsGuestDomain{Type: d})
	}
	c.Guests = []libvirtxml.CapsGuest{g}
	return c
}

func TestGuestFrom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		caps     *libvirtxml.Caps
		override string
		want     string
		wantErr  bool
	}{
		{"kvm with vmx", capsXML([]string{"qemu", "kvm"}, "vmx"), "", "kvm", false},
		{"kvm with svm", capsXML([]string{"qemu", "kvm"}, "svm"), "", "kvm", false},
		// /dev/kvm present but no hardware virtualisation (this test bed's host).
		{"kvm offered, no vmx", capsXML([]string{"qemu", "kvm"}, "sse4.2"), "", "qemu", false},
		{"qemu only", capsXML([]string{"qemu"}), "", "qemu", false},
		{"override", capsXML([]string{"qemu", "kvm"}, "vmx"), "qemu", "qemu", false},
		{"override not offered", capsXML([]string{"qemu"}), "kvm", "", true},
		{"nothing", &libvirtxml.Caps{}, "", "", true},
	} {
		g, err := guestFrom(tc.caps, tc.override)
		if (err != nil) != tc.wantErr || g.Type != tc.want {
			t.Errorf("%s: %+v, %v; want %q", tc.name, g, err, tc.want)
		}
		if err == nil && (g.Arch != "x86_64" || g.Machine != "q35") {
			t.Errorf("%s: arch/machine %s/%s", tc.name, g.Arch, g.Machine)
		}
	}
}

func TestImageFileName(t *testing.T) {
	n, err := imageFileName(hypervisor.ImageSpec{URL: "https://cloud-images.ubuntu.com/releases/noble/release-20251113/ubuntu-24.04-server-cloudimg-amd64.img"})
	if err != nil || n != "ubuntu-24.04-server-cloudimg-amd64.img" {
		t.Errorf("imageFileName = %q, %v", n, err)
	}
	if _, err := imageFileName(hypervisor.ImageSpec{FileName: "../etc/passwd"}); err == nil {
		t.Error("path-like file name accepted")
	}
}

func TestOptionsValidate(t *testing.T) {
	ok := Options{Name: "h", URI: "qemu:///system", Pool: "default", Network: "labctl"}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]Options{
		"both":        {Name: "h", URI: "qemu:///system", Pool: "p", Network: "n", Bridge: "b"},
		"neither":     {Name: "h", URI: "qemu:///system", Pool: "p"},
		"no uri":      {Name: "h", Pool: "p", Network: "n"},
		"domain type": {Name: "h", URI: "qemu:///system", Pool: "p", Network: "n", DomainType: "xen"},
	} {
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if got := (Options{Pool: "default"}).poolPath(); got != "/var/lib/libvirt/images" {
		t.Errorf("default pool path %q", got)
	}
}
