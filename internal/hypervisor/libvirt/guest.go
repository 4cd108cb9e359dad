package libvirt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/labctl/labctl/internal/hypervisor"
)

// WaitAddress waits until the VM's first NIC has an IPv4 address: from the
// guest agent first, then the network's DHCP leases, then the host's ARP
// table. It polls with backoff until ctx ends, and fails early when the VM
// stops.
func (d *Driver) WaitAddress(ctx context.Context, vm hypervisor.VM) (netip.Addr, error) {
	dom, err := d.l.DomainLookupByName(vm.Name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("looking up VM %s: %w", vm.Name, err)
	}
	mac, err := d.firstMAC(dom)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("VM %s: %w", vm.Name, err)
	}
	wait := 500 * time.Millisecond
	for {
		on, err := d.l.DomainIsActive(dom)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("reading the state of VM %s: %w", vm.Name, err)
		}
		if on != 1 {
			return netip.Addr{}, fmt.Errorf("VM %s stopped before it had an address; see its console log %s on %s", vm.Name, d.opts.consoleLog(vm.Name), d.opts.Name)
		}
		for _, src := range []lv.DomainInterfaceAddressesSource{
			lv.DomainInterfaceAddressesSrcAgent,
			lv.DomainInterfaceAddressesSrcLease,
			lv.DomainInterfaceAddressesSrcArp,
		} {
			ifaces, err := d.l.DomainInterfaceAddresses(dom, uint32(src), 0)
			if err != nil {
				continue // agent not up yet, no leases on a bridge, ...
			}
			if a, ok := ipv4Of(ifaces, mac); ok {
				return a, nil
			}
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, fmt.Errorf("waiting for the address of VM %s: %w", vm.Name, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(wait*3/2, 2*time.Second)
	}
}

// firstMAC is the MAC address of the domain's first NIC.
func (d *Driver) firstMAC(dom lv.Domain) (string, error) {
	raw, err := d.l.DomainGetXMLDesc(dom, 0)
	if err != nil {
		return "", fmt.Errorf("reading its XML: %w", err)
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(raw); err != nil {
		return "", fmt.Errorf("reading its XML: %w", err)
	}
	if dx.Devices == nil || len(dx.Devices.Interfaces) == 0 || dx.Devices.Interfaces[0].MAC == nil {
		return "", errors.New("it has no network interface")
	}
	return strings.ToLower(dx.Devices.Interfaces[0].MAC.Address), nil
}

func ipv4Of(ifaces []lv.DomainInterface, mac string) (netip.Addr, bool) {
	for _, ifc := range ifaces {
		if len(ifc.Hwaddr) == 0 || !strings.EqualFold(ifc.Hwaddr[0], mac) {
			continue
		}
		for _, a := range ifc.Addrs {
			if lv.IPAddrType(a.Type) != lv.IPAddrTypeIpv4 {
				continue
			}
			ip, err := netip.ParseAddr(a.Addr)
			if err == nil && ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip, true
			}
		}
	}
	return netip.Addr{}, false
}

// maxReadFile bounds what ReadFile returns.
const maxReadFile = 16 << 20

// agentTimeout is how long one guest agent command may take, in seconds.
const agentTimeout = 10

// ReadFile reads a file in the guest through qemu-guest-agent's
// guest-file-open/read/close. A missing file wraps ErrNotFound.
func (d *Driver) ReadFile(ctx context.Context, vm hypervisor.VM, path string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dom, err := d.l.DomainLookupByName(vm.Name)
	if err != nil {
		return nil, fmt.Errorf("looking up VM %s: %w", vm.Name, err)
	}
	var handle int64
	if err := d.agent(dom, "guest-file-open", map[string]any{"path": path, "mode": "r"}, &handle); err != nil {
		if strings.Contains(err.Error(), "No such file") {
			return nil, fmt.Errorf("reading %s in VM %s: %w", path, vm.Name, hypervisor.ErrNotFound)
		}
		return nil, fmt.Errorf("reading %s in VM %s through its guest agent: %w", path, vm.Name, err)
	}
	defer func() { _ = d.agent(dom, "guest-file-close", map[string]any{"handle": handle}, nil) }()
	var out []byte
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var chunk struct {
			Count int    `json:"count"`
			Buf   string `json:"buf-b64"`
			EOF   bool   `json:"eof"`
		}
		if err := d.agent(dom, "guest-file-read", map[string]any{"handle": handle, "count": 1 << 20}, &chunk); err != nil {
			return nil, fmt.Errorf("reading %s in VM %s: %w", path, vm.Name, err)
		}
		b, err := base64.StdEncoding.DecodeString(chunk.Buf)
		if err != nil {
			return nil, fmt.Errorf("reading %s in VM %s: the agent sent bad base64: %w", path, vm.Name, err)
		}
		out = append(out, b...)
		if len(out) > maxReadFile {
			return nil, fmt.Errorf("reading %s in VM %s: larger than %d bytes", path, vm.Name, maxReadFile)
		}
		if chunk.EOF || chunk.Count == 0 {
			return out, nil
		}
	}
}

// agent runs one guest agent command and decodes its "return" into ret.
func (d *Driver) agent(dom lv.Domain, cmd string, args map[string]any, ret any) error {
	req, err := json.Marshal(map[string]any{"execute": cmd, "arguments": args})
	if err != nil {
		return fmt.Errorf("encoding %s: %w", cmd, err)
	}
	resp, err := d.l.QEMUDomainAgentCommand(dom, string(req), agentTimeout, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	if ret == nil {
		return nil
	}
	if len(resp) == 0 {
		return fmt.Errorf("%s: the agent sent no answer", cmd)
	}
	var env struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal([]byte(resp[0]), &env); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", cmd, err)
	}
	if err := json.Unmarshal(env.Return, ret); err != nil {
		return fmt.Errorf("%s: decoding the answer: %w", cmd, err)
	}
	return nil
}
