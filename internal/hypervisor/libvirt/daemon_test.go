package libvirt

// The fast tests talk to a libvirtd of their own, started by
// libvirttest (the real daemon serving libvirt's test driver, fenced off
// from the machine's); the tests reach the same daemon over ssh too
// (ssh_test.go).

import (
	"os"
	"testing"

	"github.com/labctl/labctl/internal/testing/libvirttest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		runHelper()
		return
	}
	code := m.Run()
	libvirttest.StopShared()
	os.Exit(code)
}

// testLibvirtd starts the package's daemon on first use.
func testLibvirtd(t *testing.T) *libvirttest.Daemon {
	t.Helper()
	return libvirttest.Start(t)
}
