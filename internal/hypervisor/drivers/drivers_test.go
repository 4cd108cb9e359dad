package drivers

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
)

func lab() *config.Lab {
	return &config.Lab{
		Network: config.Network{CIDR: "10.213.0.0/24", Gateway: "10.213.0.1"},
		Hypervisors: []config.Hypervisor{
			{Name: "local", Libvirt: &config.Libvirt{URI: "test:///default", StoragePool: "default", Network: "labctl", DomainType: "qemu"}},
			{Name: "pve", Proxmox: &config.Proxmox{URL: "https://192.0.2.1:8006"}},
		},
	}
}

func TestLibvirtOptions(t *testing.T) {
	l := lab()
	o := LibvirtOptions(l, &l.Hypervisors[0])
	if o.Name != "local" || o.URI != "test:///default" || o.Pool != "default" || o.Network != "labctl" || o.DomainType != "qemu" {
		t.Errorf("options %+v", o)
	}
	if o.Subnet != netip.MustParsePrefix("10.213.0.0/24") || o.Gateway != netip.MustParseAddr("10.213.0.1") {
		t.Errorf("the lab network does not define the NAT network: %v %v", o.Subnet, o.Gateway)
	}
}

func TestOpen(t *testing.T) {
	ctx := t.Context()
	d, err := Open(ctx, lab(), "local")
	if !libvirt.Supported {
		if !errors.Is(err, libvirt.ErrNoLibvirt) {
			t.Fatalf("Open without libvirt support = %v, want ErrNoLibvirt", err)
		}
	} else {
		if err != nil {
			t.Fatal(err)
		}
		if d.Name() != "local" {
			t.Errorf("driver name %q", d.Name())
		}
		if err := Close(d); err != nil {
			t.Error(err)
		}
	}
	// The Proxmox driver opens too, and refuses a config without its token secret.
	if _, err := Open(ctx, lab(), "pve"); err == nil || !strings.Contains(err.Error(), "hypervisors[pve].proxmox.tokenSecret") {
		t.Errorf("Open(pve) = %v, want an error naming the missing tokenSecret", err)
	}
	if _, err := Open(ctx, lab(), "nope"); err == nil || !strings.Contains(err.Error(), `no hypervisor named "nope"`) {
		t.Errorf("Open(nope) = %v", err)
	}
}
