package proxmox

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

	pve "github.com/luthermonson/go-proxmox"

	"github.com/labctl/labctl/internal/hypervisor"
)

type agentIface struct {
	Name      string `json:"name"`
	Addresses []struct {
		IP   string `json:"ip-address"`
		Type string `json:"ip-address-type"`
	} `json:"ip-addresses"`
}

// agentDown matches the answers of a VM whose guest agent is not up yet.
func agentDown(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "guest agent is not running") || strings.Contains(s, "got timeout")
}

// WaitAddress polls the guest agent, backing off, until a NIC other than
// lo reports an IPv4 address that is not link-local.
func (d *Driver) WaitAddress(ctx context.Context, vm hypervisor.VM) (netip.Addr, error) {
	delay := d.o.Backoff
	for {
		var out struct {
			Result []agentIface `json:"result"`
		}
		err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/agent/network-get-interfaces", vm.Node, vm.ID), &out)
		switch {
		case err == nil:
			if a, ok := firstIPv4(out.Result); ok {
				return a, nil
			}
		case ctx.Err() != nil:
			return netip.Addr{}, fmt.Errorf("waiting for VM %d (%s) to report its address: %w", vm.ID, vm.Name, ctx.Err())
		case !agentDown(err):
			return netip.Addr{}, api(err, "asking the guest agent of VM %d (%s) for its address", vm.ID, vm.Name)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return netip.Addr{}, fmt.Errorf("waiting for VM %d (%s) to report its address through the guest agent (is qemu-guest-agent installed by cloud-init?): %w", vm.ID, vm.Name, ctx.Err())
		case <-timer.C:
		}
		delay = min(delay*2, d.o.MaxBackoff)
	}
}

func firstIPv4(ifaces []agentIface) (netip.Addr, bool) {
	for _, i := range ifaces {
		if i.Name == "lo" {
			continue
		}
		for _, a := range i.Addresses {
			ip, err := netip.ParseAddr(a.IP)
			if err == nil && ip.Is4() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
				return ip, true
			}
		}
	}
	return netip.Addr{}, false
}

// ReadFile reads a file in the guest through the guest agent's file-read.
func (d *Driver) ReadFile(ctx context.Context, vm hypervisor.VM, file string) ([]byte, error) {
	var out struct {
		Content   string        `json:"content"`
		Truncated pve.IntOrBool `json:"truncated"`
	}
	err := d.c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/agent/file-read?file=%s", vm.Node, vm.ID, url.QueryEscape(file)), &out)
	if err != nil && strings.Contains(err.Error(), "No such file or directory") {
		return nil, fmt.Errorf("reading %s in VM %d (%s): %w", file, vm.ID, vm.Name, hypervisor.ErrNotFound)
	}
	if err != nil {
		return nil, api(err, "reading %s in VM %d (%s) through the guest agent", file, vm.ID, vm.Name)
	}
	if out.Truncated {
		return nil, fmt.Errorf("reading %s in VM %d: the guest agent truncated it (over 16 MiB)", file, vm.ID)
	}
	return []byte(out.Content), nil
}
