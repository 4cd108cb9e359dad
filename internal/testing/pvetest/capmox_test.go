package pvetest

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// The clone and config rules CAPMOX meets, refusals included.
func TestCloneAndConfigRules(t *testing.T) {
	s := New(t)
	s.AddTemplate("pv1-1", 9000, "tmpl", "labctl")
	s.AddVM("pv1-1", 300, "plain-vm", 0, false, false)

	// A VM (not a template) clones only whole; storage needs a full clone.
	wantStatus(t, s, 500, "POST", "/nodes/pv1-1/qemu/300/clone", url.Values{"newid": {"301"}, "full": {"0"}}, false)
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu/9000/clone", url.Values{"newid": {"301"}, "storage": {"local-lvm"}}, false)
	// The schema refuses a parameter clone does not take.
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu/9000/clone", url.Values{"newid": {"301"}, "cores": {"2"}}, true)

	out := wantStatus(t, s, 200, "POST", "/nodes/pv1-1/qemu/9000/clone",
		url.Values{"newid": {"301"}, "full": {"1"}, "storage": {"local-lvm"}, "name": {"m1"}}, false)
	if upid, _ := out["data"].(string); !strings.Contains(upid, ":qmclone:9000:") {
		t.Errorf("clone UPID %q does not name the source VMID 9000", upid)
	}
	time.Sleep(60 * time.Millisecond)
	var tmpl, clone VM
	for _, v := range s.VMs() {
		switch v.ID {
		case 9000:
			tmpl = v
		case 301:
			clone = v
		}
	}
	if clone.Name() != "m1" || clone.Config["template"] != "" || clone.Lock != "" {
		t.Fatalf("clone 301: %+v", clone)
	}
	if clone.Config["net0"] == tmpl.Config["net0"] || clone.Config["smbios1"] == tmpl.Config["smbios1"] {
		t.Errorf("the clone kept the template's MAC or uuid: %q %q", clone.Config["net0"], clone.Config["smbios1"])
	}
	if !strings.HasPrefix(clone.Config["scsi0"], "local-lvm:vm-301-disk-0") {
		t.Errorf("clone scsi0 = %q, want its own disk", clone.Config["scsi0"])
	}

	// Config: a NIC without a MAC gets one; a cdrom needs its volume; the
	// boot order names only devices the VM has.
	wantStatus(t, s, 200, "POST", "/nodes/pv1-1/qemu/301/config", url.Values{"cores": {"4"}, "net0": {"virtio,bridge=vmbr0,tag=4"}}, false)
	wantStatus(t, s, 500, "POST", "/nodes/pv1-1/qemu/301/config", url.Values{"ide0": {"local:iso/missing.iso,media=cdrom"}}, false)
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu/301/config", url.Values{"boot": {"order=scsi0;ide3"}}, false)
	wantStatus(t, s, 501, "POST", "/nodes/pv1-1/qemu/301/config", url.Values{"hotplug": {"disk"}}, false)
	cfg := wantStatus(t, s, 200, "GET", "/nodes/pv1-1/qemu/301/config", nil, false)["data"].(map[string]any)
	if cores, ok := cfg["cores"].(float64); !ok || cores != 4 {
		t.Errorf("config cores = %#v, want the number 4 (apidoc.json: integer)", cfg["cores"])
	}
	if net0, _ := cfg["net0"].(string); !strings.HasPrefix(net0, "virtio=BC:24:11:") || !strings.HasSuffix(net0, ",bridge=vmbr0,tag=4") {
		t.Errorf("net0 = %q, want a generated MAC and the bridge and tag kept", net0)
	}

	st := wantStatus(t, s, 200, "GET", "/cluster/status", nil, false)["data"].([]any)
	if len(st) != 1 || st[0].(map[string]any)["type"] != "node" {
		t.Errorf("a single node's /cluster/status = %v, want one node entry and no cluster entry", st)
	}
}
