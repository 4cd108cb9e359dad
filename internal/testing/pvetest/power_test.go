package pvetest

import (
	"net/url"
	"testing"
	"time"
)

// A power hook hears a VM start, stop and be destroyed, in order, once
// each task has finished, with the VM's config; a stop of a stopped VM is
// no change.
func TestPowerEvents(t *testing.T) {
	s := New(t)
	s.AddVM("pv1-1", 300, "m1", 2048, false, false)
	got := make(chan PowerEvent, 10)
	s.OnPower(func(ev PowerEvent) {
		// The accessors work from the hook.
		_ = s.VMs()
		got <- ev
	})
	next := func() PowerEvent {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-got:
				return ev
			case <-deadline:
				t.Fatal("no power event within 5 s")
			case <-time.After(20 * time.Millisecond):
				_ = s.VMs() // tasks finish when the server next looks
			}
		}
	}
	wantStatus(t, s, 200, "POST", "/nodes/pv1-1/qemu/300/status/start", url.Values{}, false)
	if ev := next(); ev.Change != PowerOn || ev.VM.ID != 300 || ev.VM.Config["memory"] != "2048" || !ev.VM.Running {
		t.Fatalf("after start: %+v, want VM 300 on with its config", ev)
	}
	wantStatus(t, s, 200, "POST", "/nodes/pv1-1/qemu/300/status/stop", url.Values{}, false)
	if ev := next(); ev.Change != PowerOff || ev.VM.ID != 300 {
		t.Fatalf("after stop: %+v, want VM 300 off", ev)
	}
	wantStatus(t, s, 200, "POST", "/nodes/pv1-1/qemu/300/status/stop", url.Values{}, false)
	wantStatus(t, s, 200, "DELETE", "/nodes/pv1-1/qemu/300", url.Values{}, false)
	if ev := next(); ev.Change != Destroyed || ev.VM.ID != 300 {
		t.Fatalf("after destroy: %+v, want VM 300 destroyed (and no event for stopping a stopped VM)", ev)
	}
}

// A volume ID's '/' needs no escaping in the content API's path, as on a
// real PVE (the content subtree takes the rest of the URI as {volume}).
func TestVolumePathTakesTheRest(t *testing.T) {
	s := New(t)
	s.mu.Lock()
	s.nodes["pv1-1"].Storages["local"].Volumes["local:iso/seed.iso"] = &Volume{VolID: "local:iso/seed.iso", Content: "iso", Format: "iso", Size: 2048}
	s.mu.Unlock()
	out := wantStatus(t, s, 200, "GET", "/nodes/pv1-1/storage/local/content/local:iso/seed.iso", nil, false)
	if d, _ := out["data"].(map[string]any); d["size"] != float64(2048) || d["format"] != "iso" {
		t.Errorf("volume info = %v, want size 2048 and format iso", out["data"])
	}
	wantStatus(t, s, 200, "DELETE", "/nodes/pv1-1/storage/local/content/local:iso/seed.iso", nil, false)
	wantStatus(t, s, 501, "GET", "/nodes/pv1-1/storage/local/contents/local:iso/seed.iso", nil, true)
}
