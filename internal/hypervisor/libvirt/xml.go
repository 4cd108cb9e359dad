package libvirt

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/labctl/labctl/internal/hypervisor"
)

// domainInput is what one domain document is made from.
type domainInput struct {
	Spec       hypervisor.VMSpec
	Guest      guestProfile
	Pool       string
	Disk, Seed string   // volume names in Pool
	Data       []string // data disk volumes in Pool, after Disk
	ConsoleLog string
	Meta       vmMeta
}

// domainXML renders the domain: q35, virtio disk and NIC, the seed as a
// read-only SATA CD-ROM, a serial console logged to a file, the guest
// agent channel and a virtio RNG. No graphics.
func domainXML(in domainInput) (string, error) {
	s := in.Spec
	meta, err := in.Meta.marshal()
	if err != nil {
		return "", err
	}
	var cpu *libvirtxml.DomainCPU
	switch in.Guest.Type {
	case "kvm":
		cpu = &libvirtxml.DomainCPU{Mode: "host-passthrough", Check: "none"}
	case "qemu":
		// TCG: the most features QEMU can emulate.
		cpu = &libvirtxml.DomainCPU{Mode: "maximum", Check: "none"}
	}
	port := uint(0)
	nic := libvirtxml.DomainInterface{
		Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"},
	}
	if s.Network.MAC != "" {
		nic.MAC = &libvirtxml.DomainInterfaceMAC{Address: s.Network.MAC}
	}
	switch {
	case s.Network.Network != "":
		nic.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Network.Network}}
	case s.Network.Bridge != "":
		nic.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: s.Network.Bridge}}
	default:
		return "", fmt.Errorf("VM %s: no network or bridge to attach to", s.Name)
	}
	disks := []libvirtxml.DomainDisk{{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2", Discard: "unmap"},
		Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: in.Pool, Volume: in.Disk}},
		Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
	}}
	for i, v := range in.Data {
		if i >= 25 {
			return "", fmt.Errorf("VM %s: at most 25 data disks (vdb..vdz)", s.Name)
		}
		disks = append(disks, libvirtxml.DomainDisk{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2", Discard: "unmap"},
			Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: in.Pool, Volume: v}},
			Target: &libvirtxml.DomainDiskTarget{Dev: "vd" + string(rune('b'+i)), Bus: "virtio"},
		})
	}
	disks = append(disks, libvirtxml.DomainDisk{
		Device:   "cdrom",
		Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
		Source:   &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: in.Pool, Volume: in.Seed}},
		Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"},
		ReadOnly: &libvirtxml.DomainDiskReadOnly{},
	})
	d := &libvirtxml.Domain{
		Type:          in.Guest.Type,
		Name:          s.Name,
		UUID:          s.UUID,
		Metadata:      &libvirtxml.DomainMetadata{XML: meta},
		Memory:        &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		CurrentMemory: &libvirtxml.DomainCurrentMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		VCPU:          &libvirtxml.DomainVCPU{Placement: "static", Value: uint(s.CPUs)},
		OS: &libvirtxml.DomainOS{
			Type:        &libvirtxml.DomainOSType{Arch: in.Guest.Arch, Machine: in.Guest.Machine, Type: "hvm"},
			BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}},
		},
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, APIC: &libvirtxml.DomainFeatureAPIC{}},
		CPU:        cpu,
		Clock:      &libvirtxml.DomainClock{Offset: "utc"},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks:      disks,
			Interfaces: []libvirtxml.DomainInterface{nic},
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainSerialTarget{Port: &port},
				Log:    &libvirtxml.DomainChardevLog{File: in.ConsoleLog, Append: "off"},
			}},
			Consoles: []libvirtxml.DomainConsole{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port},
			}},
			Channels: []libvirtxml.DomainChannel{{
				Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: guestAgentChannel}},
			}},
			RNGs: []libvirtxml.DomainRNG{{
				Model:   "virtio",
				Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
			}},
			Videos:     []libvirtxml.DomainVideo{{Model: libvirtxml.DomainVideoModel{Type: "none"}}},
			MemBalloon: &libvirtxml.DomainMemBalloon{Model: "virtio"},
		},
	}
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("rendering the domain XML of %s: %w", s.Name, err)
	}
	return out, nil
}

// guestAgentChannel is the virtio-serial port qemu-guest-agent listens on.
const guestAgentChannel = "org.qemu.guest_agent.0"

// networkInput is a NAT network PrepareHost defines.
type networkInput struct {
	Name         string
	Bridge       string
	Subnet       netip.Prefix
	Gateway      netip.Addr
	LocalOnlyDNS bool
}

// networkXML renders a NAT network: the gateway is the host's address on
// the bridge, DHCP hands out the upper half of the subnet, so the lower
// half stays free for static addresses such as the management VM's.
func networkXML(in networkInput) (string, error) {
	if !in.Subnet.IsValid() || !in.Subnet.Addr().Is4() || !in.Subnet.Contains(in.Gateway) {
		return "", fmt.Errorf("network %s: needs an IPv4 subnet that holds the gateway, got %v and %v", in.Name, in.Subnet, in.Gateway)
	}
	start, end, err := upperHalf(in.Subnet, in.Gateway)
	if err != nil {
		return "", fmt.Errorf("network %s: %w", in.Name, err)
	}
	n := &libvirtxml.Network{
		Name:    in.Name,
		Forward: &libvirtxml.NetworkForward{Mode: "nat"},
		Bridge:  &libvirtxml.NetworkBridge{Name: in.Bridge, STP: "off", Delay: "0"},
		IPs: []libvirtxml.NetworkIP{{
			Address: in.Gateway.String(),
			Prefix:  uint(in.Subnet.Bits()),
			DHCP: &libvirtxml.NetworkDHCP{
				Ranges: []libvirtxml.NetworkDHCPRange{{Start: start.String(), End: end.String()}},
			},
		}},
	}
	if in.LocalOnlyDNS {
		n.Domain = &libvirtxml.NetworkDomain{Name: in.Name + ".test", LocalOnly: "yes"}
		n.DnsmasqOptions = &libvirtxml.NetworkDnsmasqOptions{Option: []libvirtxml.NetworkDnsmasqOption{{Value: "no-resolv"}}}
	}
	out, err := n.Marshal()
	if err != nil {
		return "", fmt.Errorf("rendering the XML of network %s: %w", in.Name, err)
	}
	return out, nil
}

// upperHalf is the DHCP range: the upper half of the subnet without the
// broadcast address and the gateway.
func upperHalf(p netip.Prefix, gw netip.Addr) (netip.Addr, netip.Addr, error) {
	if p.Bits() > 29 {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("subnet %s is too small; use /29 or larger", p)
	}
	base := p.Masked().Addr().As4()
	size := uint32(1) << (32 - p.Bits())
	first := be(base) + size/2
	last := be(base) + size - 2
	if g := be(gw.As4()); g >= first && g <= last {
		if g == last {
			last--
		} else {
			first = g + 1
		}
	}
	return fromBE(first), fromBE(last), nil
}

func be(a [4]byte) uint32 {
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
}

func fromBE(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// bridgeName is the Linux bridge of a network labctl defines: "lc-" and the
// network name, cut to the 15 characters Linux allows.
func bridgeName(network string) string {
	n := "lc-" + network
	if len(n) > 15 {
		n = n[:15]
	}
	return n
}

// poolXML renders a directory pool.
func poolXML(name, path string) (string, error) {
	p := &libvirtxml.StoragePool{
		Type:   "dir",
		Name:   name,
		Target: &libvirtxml.StoragePoolTarget{Path: path},
	}
	out, err := p.Marshal()
	if err != nil {
		return "", fmt.Errorf("rendering the XML of storage pool %s: %w", name, err)
	}
	return out, nil
}

// volumeXML renders a volume; backing, when set, makes it a qcow2 overlay
// of that path.
func volumeXML(name, format string, capacity uint64, backing, backingFormat string) (string, error) {
	v := &libvirtxml.StorageVolume{
		Name:     name,
		Capacity: &libvirtxml.StorageVolumeSize{Value: capacity, Unit: "bytes"},
		Target:   &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: format}},
	}
	if backing != "" {
		v.BackingStore = &libvirtxml.StorageVolumeBackingStore{
			Path:   backing,
			Format: &libvirtxml.StorageVolumeTargetFormat{Type: backingFormat},
		}
	}
	out, err := v.Marshal()
	if err != nil {
		return "", fmt.Errorf("rendering the XML of volume %s: %w", name, err)
	}
	return out, nil
}

// guestProfile is how VMs run on a host.
type guestProfile struct {
	Type    string // kvm, qemu, or what else the host offers
	Arch    string
	Machine string // q35 where offered, else the host's default
}

func guestFrom(caps *libvirtxml.Caps, override string) (guestProfile, error) {
	var pick *libvirtxml.CapsGuest
	for i := range caps.Guests {
		g := &caps.Guests[i]
		if g.OSType != "hvm" {
			continue
		}
		if g.Arch.Name == "x86_64" {
			pick = g
			break
		}
		if pick == nil {
			pick = g
		}
	}
	if pick == nil {
		return guestProfile{}, errors.New("the host offers no hvm guests; is qemu-system-x86 installed?")
	}
	gp := guestProfile{Arch: pick.Arch.Name}
	var offered []string
	for _, dom := range pick.Arch.Domains {
		offered = append(offered, dom.Type)
	}
	for _, m := range pick.Arch.Machines {
		if m.Name == "q35" {
			gp.Machine = "q35"
		}
	}
	hwVirt := false
	if cpu := caps.Host.CPU; cpu != nil {
		for _, f := range cpu.FeatureFlags {
			if f.Name == "vmx" || f.Name == "svm" {
				hwVirt = true
			}
		}
		if cpu.Features != nil && (cpu.Features.VMX != nil || cpu.Features.SVM != nil) {
			hwVirt = true
		}
	}
	switch {
	case override != "":
		if !slices.Contains(offered, override) {
			return guestProfile{}, fmt.Errorf("domainType %s is not offered for %s guests here (offered: %s)", override, gp.Arch, strings.Join(offered, ", "))
		}
		gp.Type = override
	case slices.Contains(offered, "kvm") && hwVirt:
		gp.Type = "kvm"
	case slices.Contains(offered, "qemu"):
		gp.Type = "qemu"
	case len(offered) > 0:
		gp.Type = offered[0]
	default:
		return guestProfile{}, fmt.Errorf("the host offers no domain type for %s guests", gp.Arch)
	}
	return gp, nil
}
