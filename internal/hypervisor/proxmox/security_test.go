package proxmox

import (
	"bytes"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/testing/pvetest"
)

func TestTLSVerifiedByDefault(t *testing.T) {
	srv := pvetest.New(t)
	h := hv(srv)
	h.Proxmox.TLS = config.TLS{}
	d, _ := newDriver(t, srv, h)
	_, err := d.ListVMs(ctx(t), "home")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("system roots accepted the test server: %v", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests got through", n)
	}
}

func TestTLSPinnedFingerprintMismatch(t *testing.T) {
	srv := pvetest.New(t)
	h := hv(srv)
	h.Proxmox.TLS.Fingerprint = strings.Repeat("AB:", 31) + "AB"
	d, _ := newDriver(t, srv, h)
	_, err := d.ListVMs(ctx(t), "home")
	var fe *FingerprintError
	if !errors.As(err, &fe) || fe.Got != Fingerprint(srv.Certificate()) {
		t.Fatalf("err = %v", err)
	}
}

func TestTLSCAFile(t *testing.T) {
	srv := pvetest.New(t)
	p := filepath.Join(t.TempDir(), "pve-root-ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	h := hv(srv)
	h.Proxmox.TLS = config.TLS{CAFile: p}
	d, _ := newDriver(t, srv, h)
	if _, err := d.ListVMs(ctx(t), "home"); err != nil {
		t.Fatal(err)
	}
	h.Proxmox.TLS.CAFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := newFor(h, fastOptions(t, srv, &bytes.Buffer{})); err == nil || !strings.Contains(err.Error(), "hypervisors[pve].proxmox.tls.caFile") {
		t.Errorf("missing CA file: %v", err)
	}
}

func TestInsecureSkipVerifyWarns(t *testing.T) {
	srv := pvetest.New(t)
	h := hv(srv)
	h.Proxmox.TLS = config.TLS{InsecureSkipVerify: true}
	d, buf := newDriver(t, srv, h)
	if !strings.Contains(buf.String(), "warning: TLS verification is off for hypervisor pve") {
		t.Errorf("no warning: %q", buf.String())
	}
	if _, err := d.ListVMs(ctx(t), "home"); err != nil {
		t.Fatal(err)
	}
}

// New sends the token as PVE's API token header: the token id and the
// secret drivers.ProxmoxOptions read (TestProxmoxOptionsReadTheSecret).
func TestNewSendsTheToken(t *testing.T) {
	d, err := New(Options{Name: "pve", Endpoint: config.Proxmox{URL: "https://127.0.0.1:8006", TokenID: "root@pam!labctl"},
		TokenSecret: "s3cr3t-from-file"})
	if err != nil || d.auth != "PVEAPIToken=root@pam!labctl=s3cr3t-from-file" {
		t.Errorf("file secret: %v", err)
	}
}

// TestSecretNeverInOutput runs the driver at the highest verbosity through
// success and failure paths and greps everything it wrote or returned.
func TestSecretNeverInOutput(t *testing.T) {
	srv := pvetest.New(t)
	d, buf := newDriver(t, srv, hv(srv))
	var errs []string
	img := ensureImage(t, d, srv)
	vm, err := d.CreateVM(ctx(t), mgmtSpec(img, 201))
	if err != nil {
		t.Fatal(err)
	}
	srv.FailRequests("GET", "/cluster/resources", 10, 500)
	_, err = d.ListVMs(ctx(t), "home")
	errs = append(errs, err.Error())
	srv.FailTasks("POST", "/nodes/{node}/qemu/{vmid}/status/start", 1, "start failed: QEMU exited with code 1")
	errs = append(errs, d.StartVM(ctx(t), vm).Error())
	wrong := hv(srv)
	o := fastOptions(t, srv, buf)
	t.Setenv("PVE_TOKEN_SECRET", srv.Secret+"-wrong")
	bad, err := newFor(wrong, o)
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.ListVMs(ctx(t), "home")
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong secret: %v", err)
	}
	errs = append(errs, err.Error())
	err = d.DeleteVM(ctx(t), hypervisor.VM{ID: 201, Node: "pv1-1", Lab: "other"})
	errs = append(errs, err.Error())
	all := buf.String() + strings.Join(errs, "\n")
	if !strings.Contains(buf.String(), "SEND: POST") {
		t.Fatalf("the request trace is missing at -v 9; the grep would prove nothing:\n%s", buf.String())
	}
	if strings.Contains(all, srv.Secret) {
		t.Errorf("the token secret appears in output or errors")
	}
}
