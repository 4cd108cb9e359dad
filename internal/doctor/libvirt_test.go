package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/ui"
)

func TestMain(m *testing.M) {
	code := m.Run()
	libvirttest.StopShared()
	os.Exit(code)
}

// localLab is the built-in local-kvm lab with its libvirt URI, pool and
// network replaced.
func localLab(t *testing.T, uri, pool, network string) string {
	t.Helper()
	data, err := os.ReadFile("../../examples/local-kvm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, r := range [][2]string{{"uri: qemu:///system", "uri: " + uri}, {"storagePool: default", "storagePool: " + pool}, {"network: labctl", "network: " + network}} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("examples/local-kvm.yaml no longer holds %q; update the test", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	p := filepath.Join(t.TempDir(), "lab.yaml")
	writeFile(t, p, s, 0o600)
	return p
}

// runLibvirt runs doctor with the hypervisor checks on, as a user does.
func runLibvirt(t *testing.T, lab string) (*Report, error, string) {
	t.Helper()
	home(t)
	t.Setenv("KUBECONFIG", "")
	io, _, out, _ := ui.Test()
	io.Err = out
	r, err := Run(context.Background(), Options{IO: io, LoadLab: func(ctx context.Context) (*config.Lab, config.Source, error) {
		return config.Load(ctx, config.Request{Path: lab, Explicit: true})
	}})
	return r, err, out.String()
}

// TestDoctorLibvirtDown is the newcomer's case from issue 14: with no
// libvirtd, doctor fails and says why, instead of "all ok".
func TestDoctorLibvirtDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "libvirt-sock")
	r, err, text := runLibvirt(t, localLab(t, "qemu:///system?socket="+sock, "default", "labctl"))
	if !errors.Is(err, ErrFailed) || r.Failed == 0 {
		t.Fatalf("doctor with libvirtd down: err %v, %d failed:\n%s", err, r.Failed, text)
	}
	c := check(t, r, "libvirt local")
	if c.Status != Fail || !strings.Contains(c.Detail, sock) {
		t.Errorf("connection check: %+v", c)
	}
	if check(t, r, "libvirt support").Status != OK {
		t.Errorf("libvirt support: %+v", check(t, r, "libvirt support"))
	}
	if !strings.Contains(text, "libvirt local") || !strings.Contains(text, "fail") {
		t.Errorf("the table does not show the failed host:\n%s", text)
	}
}

// TestDoctorLibvirtUp checks a host that answers: the real libvirtd the
// libvirt tests start, serving libvirt's test driver (a pool
// "default-pool" and a network "default", both active).
func TestDoctorLibvirtUp(t *testing.T) {
	d := libvirttest.Start(t)
	r, err, text := runLibvirt(t, localLab(t, d.URI(), "default-pool", "default"))
	if err != nil && !errors.Is(err, ErrFailed) {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		st     Status
		detail string
	}{
		"libvirt support":              {OK, "github.com/digitalocean/go-libvirt v"},
		"libvirt local":                {OK, "connected to test:///default"},
		"libvirt local pool":           {OK, "storage pool default-pool is active"},
		"libvirt local network":        {OK, "network default is active"},
		"libvirt local virtualisation": {Warn, `domain type "test": neither KVM nor TCG`},
	} {
		c := check(t, r, name)
		if c.Status != want.st || !strings.Contains(c.Detail, want.detail) {
			t.Errorf("%s = %s %q, want %s containing %q", name, c.Status, c.Detail, want.st, want.detail)
		}
	}
	if t.Failed() {
		t.Log(text)
	}

	// What mgmt up would make is a warning that says so.
	r, _, _ = runLibvirt(t, localLab(t, d.URI(), "labctl-doctor-none", "labctl-doctor-none"))
	for _, name := range []string{"libvirt local pool", "libvirt local network"} {
		if c := check(t, r, name); c.Status != Warn || !strings.Contains(c.Detail, "does not exist yet: labctl mgmt up defines and starts it") {
			t.Errorf("%s = %+v", name, c)
		}
	}
}
