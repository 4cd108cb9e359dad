package mgmt_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/mgmt"
)

// TestDryRunNamesTheSystemItNeeds: mgmt up and down --dry-run plan from
// what the Proxmox VE hypervisor holds; without its token they say which
// hypervisor and why, rather than only that a variable is unset.
func TestDryRunNamesTheSystemItNeeds(t *testing.T) {
	t.Setenv("PVE_TOKEN_SECRET", "")
	os.Unsetenv("PVE_TOKEN_SECRET")
	lab, _, err := config.Load(ctx(t), config.Request{Path: "../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	// The command factory's Driver: the real drivers, which read the
	// token before they connect.
	driver := func(c context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(c, lab, name) }
	want := "the dry run asks Proxmox VE hypervisor pve (https://192.168.0.8:8006) which VMs already exist, so it must reach it: "
	var o out
	err = mgmt.Up(ctx(t), mgmt.UpOptions{IO: o.io(), Lab: lab, Driver: driver, DryRun: true})
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "PVE_TOKEN_SECRET") {
		t.Errorf("mgmt up --dry-run: %v", err)
	}
	err = mgmt.Down(ctx(t), mgmt.DownOptions{IO: o.io(), Lab: lab, Driver: driver, DryRun: true})
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("mgmt down --dry-run: %v", err)
	}
}
