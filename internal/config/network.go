package config

import (
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// k3sCIDRs are the k3s defaults the management VM runs with.
var k3sCIDRs = []struct {
	what string
	pfx  netip.Prefix
}{
	{"k3s's pod network", netip.MustParsePrefix("10.42.0.0/16")},
	{"k3s's service network", netip.MustParsePrefix("10.43.0.0/16")},
}

func (v *validator) network(p *field.Path) {
	n := v.lab.Network
	if n.CIDR == "" {
		v.add(p.Child("cidr"), "is required: the VM subnet, e.g. 192.168.4.0/24")
	} else if pfx, err := netip.ParsePrefix(n.CIDR); err != nil || !pfx.Addr().Is4() {
		v.add(p.Child("cidr"), "%q is not an IPv4 CIDR such as 192.168.4.0/24", n.CIDR)
	} else if pfx.Masked() != pfx {
		v.add(p.Child("cidr"), "%q has host bits set; write %s", n.CIDR, pfx.Masked())
	} else if pfx.Bits() > 29 {
		v.add(p.Child("cidr"), "%q is too small for a lab; use /29 or larger", n.CIDR)
	} else {
		v.subnet = pfx
		for _, k := range k3sCIDRs {
			if pfx.Overlaps(k.pfx) {
				v.add(p.Child("cidr"), "%s overlaps %s %s on the management VM; pick a lab network outside it", pfx, k.what, k.pfx)
			}
		}
	}
	v.hostIP(p.Child("gateway"), n.Gateway, true)
	if n.VLAN < 0 || n.VLAN > 4094 {
		v.add(p.Child("vlan"), "must be between 1 and 4094 (or 0 for untagged), got %d", n.VLAN)
	}
	if len(n.DNS) == 0 {
		v.add(p.Child("dns"), "needs at least one DNS server, e.g. [%s]", orExample(n.Gateway, "192.168.4.1"))
	}
	first := make(map[netip.Addr]int, len(n.DNS))
	for i, d := range n.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil || !a.Is4() {
			v.add(p.Child("dns").Index(i), "%q is not an IPv4 address", d)
		} else if j, dup := first[a]; dup {
			v.add(p.Child("dns").Index(i), "%s is listed twice (also dns[%d])", d, j)
		} else {
			first[a] = i
		}
	}
}

// hostIP checks that s is a usable address in the lab subnet.
func (v *validator) hostIP(p *field.Path, s string, required bool) (netip.Addr, bool) {
	if s == "" {
		if required {
			v.add(p, "is required: an IPv4 address in network.cidr")
		}
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		v.add(p, "%q is not an IPv4 address", s)
		return netip.Addr{}, false
	}
	if v.subnet.IsValid() {
		if !v.subnet.Contains(a) {
			v.add(p, "%s is outside network.cidr %s", a, v.subnet)
			return a, false
		}
		if a == v.subnet.Addr() || a == broadcast(v.subnet) {
			v.add(p, "%s is the network or broadcast address of %s; pick a host address", a, v.subnet)
			return a, false
		}
	}
	return a, true
}

// sortedAddrs are the keys of m in address order.
func sortedAddrs(m map[netip.Addr]string) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// addrsIn are the addresses of sorted between first and last, inclusive.
func addrsIn(sorted []netip.Addr, first, last netip.Addr) []netip.Addr {
	lo, _ := slices.BinarySearchFunc(sorted, first, netip.Addr.Compare)
	hi := lo
	for hi < len(sorted) && sorted[hi].Compare(last) <= 0 {
		hi++
	}
	return sorted[lo:hi]
}

// freeCIDR suggests a range the size of preferred that is clear of the
// lab network, k3s's networks on the management VM, the LAN addresses
// nodes must reach, and also: preferred itself when it is clear, else the
// first clear block of that size in the private ranges. The suggestion is
// never the range just refused.
func (v *validator) freeCIDR(preferred string, also netip.Prefix) string {
	want := netip.MustParsePrefix(preferred)
	avoid := []netip.Prefix{}
	if v.subnet.IsValid() {
		avoid = append(avoid, v.subnet)
	}
	if also.IsValid() {
		avoid = append(avoid, also)
	}
	for _, k := range k3sCIDRs {
		avoid = append(avoid, k.pfx)
	}
	clear := func(p netip.Prefix) bool {
		for _, a := range avoid {
			if p.Overlaps(a) {
				return false
			}
		}
		for _, a := range v.lanAddrs() {
			if p.Contains(a.addr) {
				return false
			}
		}
		return true
	}
	if clear(want) {
		return want.String()
	}
	step := uint32(1) << (32 - want.Bits())
	for _, space := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} {
		sp := netip.MustParsePrefix(space)
		if sp.Bits() > want.Bits() {
			continue
		}
		start := u32(sp.Addr().As4())
		for n := uint32(0); n < 1<<(want.Bits()-sp.Bits()); n++ {
			a := start + n*step
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), want.Bits())
			if clear(p) {
				return p.String()
			}
		}
	}
	return "a private range clear of the lab network, the podCIDR and the LAN"
}

// lanAddr is an address on the LAN that something else already uses.
type lanAddr struct {
	what string // e.g. "the gateway"
	addr netip.Addr
}

// lanAddrs are the gateway, the DNS servers and the Proxmox hosts named by
// address, each address once, in that order. Worked out once.
func (v *validator) lanAddrs() []lanAddr {
	if v.lan != nil {
		return v.lan
	}
	addrs := []lanAddr{}
	seen := map[netip.Addr]bool{}
	add := func(what, s string) {
		a, err := netip.ParseAddr(s)
		if err != nil || seen[a] {
			return
		}
		seen[a] = true
		addrs = append(addrs, lanAddr{what, a})
	}
	add("the gateway", v.lab.Network.Gateway)
	for _, d := range v.lab.Network.DNS {
		add("the DNS server", d)
	}
	for _, h := range v.lab.Hypervisors {
		if h.Proxmox == nil {
			continue
		}
		if u, err := url.Parse(h.Proxmox.URL); err == nil {
			add("the address of hypervisor "+h.Name, u.Hostname())
		}
	}
	v.lan = addrs
	return addrs
}

func (v *validator) cidr(p *field.Path, s string) netip.Prefix {
	pfx, err := netip.ParsePrefix(s)
	if err != nil || !pfx.Addr().Is4() {
		v.add(p, "%q is not an IPv4 CIDR such as 10.244.0.0/16", s)
		return netip.Prefix{}
	}
	if pfx.Masked() != pfx {
		v.add(p, "%q has host bits set; write %s", s, pfx.Masked())
		return netip.Prefix{}
	}
	return pfx
}

// ipRange is an inclusive range of IPv4 addresses.
type ipRange struct{ first, last netip.Addr }

func (r ipRange) String() string { return r.first.String() + "-" + r.last.String() }

func (r ipRange) contains(a netip.Addr) bool {
	return r.first.Compare(a) <= 0 && a.Compare(r.last) <= 0
}

func (r ipRange) overlaps(o ipRange) bool {
	return r.first.Compare(o.last) <= 0 && o.first.Compare(r.last) <= 0
}

func (r ipRange) size() int {
	a, b := r.first.As4(), r.last.As4()
	return int(u32(b)-u32(a)) + 1
}

func u32(b [4]byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func broadcast(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	n := u32(a) | (1<<(32-p.Bits()) - 1)
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

func (v *validator) ipRange(p *field.Path, s string) (ipRange, bool) {
	first, last, ok := strings.Cut(s, "-")
	if s == "" {
		v.add(p, "is required: first-last addresses for the nodes, e.g. 192.168.4.40-192.168.4.59")
		return ipRange{}, false
	}
	if !ok {
		v.add(p, "%q must be first-last, e.g. 192.168.4.40-192.168.4.59", s)
		return ipRange{}, false
	}
	a, okA := v.hostIP(p, strings.TrimSpace(first), true)
	b, okB := v.hostIP(p, strings.TrimSpace(last), true)
	if !okA || !okB {
		return ipRange{}, false
	}
	if b.Less(a) {
		v.add(p, "%q ends before it starts; write the lower address first", s)
		return ipRange{}, false
	}
	return ipRange{a, b}, true
}
