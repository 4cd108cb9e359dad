package proxmox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/testing/pvetest"
)

const imageURL = "https://cloud-images.example/noble/current/noble-server-cloudimg-amd64.img"

var imageBytes = bytes.Repeat([]byte("qcow2-image "), 1000)

func imageSum() string {
	s := sha256.Sum256(imageBytes)
	return hex.EncodeToString(s[:])
}

// hv is the lab.yaml hypervisor for srv, pinned to its certificate.
func hv(srv *pvetest.Server) config.Hypervisor {
	return config.Hypervisor{Name: "pve", Proxmox: &config.Proxmox{
		URL: srv.URL, TokenID: srv.TokenID, TokenSecret: config.SecretRef{Env: "PVE_TOKEN_SECRET"},
		TLS:       config.TLS{Fingerprint: Fingerprint(srv.Certificate())},
		Nodes:     []config.PVENode{{Name: "pv1-1", Storage: "local-lvm", ImageStorage: "local", Bridge: "vmbr0"}},
		VMIDRange: &config.VMIDRange{Start: 200, End: 299},
	}}
}

// fastOptions keep retries and polls short; log and warnings go to buf.
// The token secret is srv's, in the env variable hv names.
func fastOptions(t testing.TB, srv *pvetest.Server, buf *bytes.Buffer) Options {
	t.Setenv("PVE_TOKEN_SECRET", srv.Secret)
	return Options{Warn: buf, Log: buf, Verbose: 9, Timeout: 2 * time.Second, Backoff: 5 * time.Millisecond,
		MaxBackoff: 40 * time.Millisecond}
}

// newFor is New for hypervisor h of lab.yaml, its secret read as
// drivers.ProxmoxOptions reads it (drivers imports this package, so its
// tests cannot import drivers).
func newFor(h config.Hypervisor, o Options) (*Driver, error) {
	secret, err := h.ReadTokenSecret()
	if err != nil {
		return nil, err
	}
	o.Name, o.Endpoint, o.TokenSecret = h.Name, *h.Proxmox, secret
	return New(o)
}

func newDriver(t *testing.T, srv *pvetest.Server, h config.Hypervisor) (*Driver, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	d, err := newFor(h, fastOptions(t, srv, &buf))
	if err != nil {
		t.Fatal(err)
	}
	return d, &buf
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// fakeISO is the smallest byte string with an ISO 9660 volume descriptor.
func fakeISO(payload string) []byte {
	b := make([]byte, 0x8800)
	copy(b[0x8001:], "CD001")
	copy(b[0x8100:], payload)
	return b
}

func mgmtSpec(img hypervisor.Image, id int) hypervisor.VMSpec {
	return hypervisor.VMSpec{Lab: "home", Name: "labctl-mgmt", Node: "pv1-1", ID: id, CPUs: 4, MemoryMiB: 8192, DiskGiB: 40,
		Image: img, Network: hypervisor.NetworkSpec{Bridge: "vmbr0", VLAN: 4},
		CloudInit: hypervisor.CloudInit{Hostname: "labctl-mgmt", User: "ubuntu", SSHKeys: []string{"ssh-ed25519 AAAAC3Nza labctl@test"},
			Address: netip.MustParsePrefix("192.168.4.21/24"), Gateway: netip.MustParseAddr("192.168.4.1"),
			DNSServers: []netip.Addr{netip.MustParseAddr("192.168.4.1")}, SeedISO: fakeISO("#cloud-config\n")}}
}

func ensureImage(t *testing.T, d *Driver, srv *pvetest.Server) hypervisor.Image {
	t.Helper()
	srv.ServeURL(imageURL, imageBytes)
	img, err := d.EnsureImage(ctx(t), hypervisor.ImageSpec{Node: "pv1-1", URL: imageURL, Checksum: "sha256:" + imageSum()})
	if err != nil {
		t.Fatal(err)
	}
	return img
}
