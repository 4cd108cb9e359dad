package proxmox

import (
	"slices"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/testing/pvetest"
)

func TestTemplatesAndAddTags(t *testing.T) {
	srv := pvetest.New(t)
	d, _ := newDriver(t, srv, hv(srv))
	srv.AddVM("pv1-1", 105, "ubuntu-2404-kube-v1.35.4", 2048, false, true, "v1.35.4")
	srv.AddVM("pv1-1", 106, "other-template", 2048, false, true)
	srv.AddVM("pv1-1", 201, "labctl-vm", 2048, true, false, "labctl", "labctl-lab-home")

	want := []string{"labctl", "labctl-image-ubuntu-2404-kube", "kubernetes-v1.35.4"}
	if err := d.AddTags(ctx(t), "pv1-1", 105, want); err != nil {
		t.Fatal(err)
	}
	ts, err := d.Templates(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].ID != 105 || !slices.Equal(ts[0].Tags, append([]string{"v1.35.4"}, want...)) {
		t.Fatalf("templates %+v", ts)
	}
	// Tags already there: no write.
	srv.ResetRequests()
	if err := d.AddTags(ctx(t), "pv1-1", 105, want[:1]); err != nil || srv.Writes() != 0 {
		t.Fatalf("re-tag: err %v, %d writes", err, srv.Writes())
	}
	// A concurrent change (stale digest) fails instead of being overwritten.
	var out any
	err = d.c.Put(ctx(t), "/nodes/pv1-1/qemu/105/config", map[string]any{"tags": "x", "digest": "0000000000000000000000000000000000000000"}, &out)
	if err == nil || !strings.Contains(err.Error(), "modified configuration") {
		t.Fatalf("stale digest: %v", err)
	}
	if err := d.AddTags(ctx(t), "pv1-1", 999, want); err == nil {
		t.Fatal("tagging a missing VM succeeded")
	}
}
