package drivers

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/config"
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
	l.Hypervisors[0].Libvirt.SSHKeyFile = "~/.ssh/id_kvm"
	l.Hypervisors[0].Libvirt.TLS = &config.LibvirtTLS{CAFile: "/pki/ca.pem", CertFile: "/pki/c.pem", KeyFile: "/pki/k.pem"}
	o := LibvirtOptions(l, &l.Hypervisors[0])
	if o.Name != "local" || o.URI != "test:///default" || o.Pool != "default" || o.Network != "labctl" || o.DomainType != "qemu" {
		t.Errorf("options %+v", o)
	}
	if o.SSHKeyFile != "~/.ssh/id_kvm" || o.TLS.CAFile != "/pki/ca.pem" || o.TLS.CertFile != "/pki/c.pem" || o.TLS.KeyFile != "/pki/k.pem" {
		t.Errorf("the key file and TLS files are not passed on: %+v", o)
	}
	if o.Subnet != netip.MustParsePrefix("10.213.0.0/24") || o.Gateway != netip.MustParseAddr("10.213.0.1") {
		t.Errorf("the lab network does not define the NAT network: %v %v", o.Subnet, o.Gateway)
	}
}

// ProxmoxOptions reads the token secret through config's one reader,
// from the env variable or the file the hypervisor names, and passes the
// endpoint on.
func TestProxmoxOptionsReadTheSecret(t *testing.T) {
	h := config.Hypervisor{Name: "pve", Proxmox: &config.Proxmox{URL: "https://127.0.0.1:8006", TokenID: "root@pam!labctl",
		TokenSecret: config.SecretRef{Env: "PVE_TOKEN_SECRET"}}}
	t.Setenv("PVE_TOKEN_SECRET", "")
	os.Unsetenv("PVE_TOKEN_SECRET")
	_, err := ProxmoxOptions(&h)
	if err == nil || !strings.Contains(err.Error(), "hypervisors[pve].proxmox.tokenSecret.env") || !strings.Contains(err.Error(), "export PVE_TOKEN_SECRET=") {
		t.Errorf("unset env: %v", err)
	}
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("s3cr3t-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.Proxmox.TokenSecret = config.SecretRef{File: p}
	o, err := ProxmoxOptions(&h)
	if err != nil || o.TokenSecret != "s3cr3t-from-file" {
		t.Errorf("file secret: %v", err)
	}
	if o.Name != "pve" || o.Endpoint.URL != "https://127.0.0.1:8006" || o.Endpoint.TokenID != "root@pam!labctl" {
		t.Errorf("the endpoint is not passed on: %+v", o.Endpoint)
	}
	if _, err := ProxmoxOptions(&config.Hypervisor{Name: "kvm", Libvirt: &config.Libvirt{}}); err == nil || !strings.Contains(err.Error(), "hypervisors[kvm]: not a Proxmox hypervisor") {
		t.Errorf("a libvirt hypervisor: %v", err)
	}
}

func TestOpen(t *testing.T) {
	ctx := t.Context()
	// The libvirt driver opens, and dials the socket the URI names: none
	// listens there, and it says so.
	l := lab()
	l.Hypervisors[0].Libvirt.URI = "test:///default?socket=" + filepath.Join(t.TempDir(), "libvirt-sock")
	if _, err := Open(ctx, l, "local"); err == nil || !strings.Contains(err.Error(), "libvirt hypervisor local") || !strings.Contains(err.Error(), "libvirtd is not running") {
		t.Errorf("Open(local) = %v, want the libvirt driver's error for a missing daemon", err)
	}
	// The Proxmox driver opens too, and refuses a config without its token secret.
	if _, err := Open(ctx, lab(), "pve"); err == nil || !strings.Contains(err.Error(), "hypervisors[pve].proxmox.tokenSecret") {
		t.Errorf("Open(pve) = %v, want an error naming the missing tokenSecret", err)
	}
	if _, err := Open(ctx, lab(), "nope"); err == nil || !strings.Contains(err.Error(), `hypervisor "nope" is not in the lab config; it has: `) {
		t.Errorf("Open(nope) = %v", err)
	}
}
