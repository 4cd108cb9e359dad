package testbed

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/labctl/labctl/internal/testing/testbed/pki"
)

// ExampleCAFile is where examples/lab.yaml's tls.caFile points, under HOME.
const ExampleCAFile = ".config/labctl/pve-root-ca.pem"

// exampleCA is one CA per test binary, so two runs of labctl in one test
// (each with its own HOME) see the same caFile, as the owner's machine
// does, and a re-run has nothing to change.
var exampleCA = sync.OnceValues(func() (*pki.CA, error) { return pki.NewCA("labctl example PVE CA") })

// WriteExampleCA puts the test binary's example CA certificate where
// examples/lab.yaml's hypervisors[pve].proxmox.tls.caFile names it under
// home, as the owner copies /etc/pve/pve-root-ca.pem there, and returns
// the CA (to issue the fake PVE's certificate). labctl reads that file to
// hand CAPMOX the lab's CA.
func WriteExampleCA(t testing.TB, home string) *pki.CA {
	t.Helper()
	ca, err := exampleCA()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(home, ExampleCAFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// ExampleHome points HOME at a new folder holding the example lab's CA
// file (WriteExampleCA), for the test's length, and returns the CA.
func ExampleHome(t testing.TB) *pki.CA {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	return WriteExampleCA(t, home)
}
