package cmd

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/orphans"
)

// labctl gc on the example lab without a management cluster: it lists
// the VMs labctl tagged for the lab that are not the management VM,
// keeps a running one without --force, deletes after --yes, and a re-run
// finds nothing.
func TestGCWithoutManagementCluster(t *testing.T) {
	srv, lab := proxmoxLab(t)
	srv.AddVM("pv1-1", 202, "labctl-mgmt-old", 2048, false, false, "labctl", "labctl-lab-home")
	srv.AddVM("pv1-1", 203, "labctl-mgmt-spare", 1024, true, false, "labctl", "labctl-lab-home")
	srv.AddVM("pv1-1", 204, "other-lab", 1024, false, false, "labctl", "labctl-lab-other")
	vmids := func() []int {
		var ids []int
		for _, v := range srv.VMs() {
			ids = append(ids, v.ID)
		}
		return ids
	}

	code, out, errOut := run(t, "", "gc", "-c", lab, "--dry-run", "-o", "json")
	if code != 0 {
		t.Fatalf("gc --dry-run -o json: exit %d\n%s", code, errOut)
	}
	var got []orphans.Orphan
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("gc -o json: %v\n%s", err, out)
	}
	if len(got) != 2 || got[0].Name != "labctl-mgmt-old" || got[0].ID != 202 || got[0].MemoryMiB != 2048 || got[0].Running ||
		got[1].Name != "labctl-mgmt-spare" || !got[1].Running {
		t.Fatalf("gc lists %+v; want VMs 202 (stopped) and 203 (running)", got)
	}
	if !strings.Contains(errOut, "has no management cluster") || !strings.Contains(errOut, "dry run: nothing was deleted") {
		t.Errorf("gc --dry-run says:\n%s", errOut)
	}
	if ids := vmids(); len(ids) != 4 {
		t.Fatalf("the dry run deleted something: VMs %v", ids)
	}

	code, _, errOut = run(t, "y\n", "gc", "-c", lab)
	if code != 1 || !strings.Contains(errOut, "pass --yes") {
		t.Fatalf("gc without a terminal: exit %d\n%s", code, errOut)
	}

	code, out, errOut = run(t, "", "gc", "-c", lab, "--yes")
	if code != 0 {
		t.Fatalf("gc --yes: exit %d\n%s", code, errOut)
	}
	if !strings.Contains(out, "kept without --force") || !strings.Contains(errOut, "kept vm labctl-mgmt-spare (VMID 203 on pv1-1) on pve: it runs; pass --force") {
		t.Errorf("gc --yes does not say it keeps the running VM:\n%s\n%s", out, errOut)
	}
	if ids := vmids(); !slices.Equal(ids, []int{201, 203, 204}) {
		t.Fatalf("after gc --yes the VMs are %v, want 201, 203 (running) and 204 (another lab's)", ids)
	}

	code, _, errOut = run(t, "", "gc", "-c", lab, "--yes", "--force")
	if code != 0 {
		t.Fatalf("gc --yes --force: exit %d\n%s", code, errOut)
	}
	if ids := vmids(); !slices.Equal(ids, []int{201, 204}) {
		t.Fatalf("after gc --yes --force the VMs are %v, want 201 and 204", ids)
	}
	code, out, errOut = run(t, "", "gc", "-c", lab, "--yes")
	if code != 0 || strings.TrimSpace(out) != "no orphans" {
		t.Errorf("the re-run: exit %d\n%s\n%s", code, out, errOut)
	}
}
