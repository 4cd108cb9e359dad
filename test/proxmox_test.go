package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/testing/pvetest"
)

// TestDoctorProxmoxBinary runs the labctl binary's doctor against the
// strict fake PVE (every request checked against the real PVE API schema)
// with the owner's inventory: a stopped VM counts against CAPMOX's memory.
func TestDoctorProxmoxBinary(t *testing.T) {
	srv := pvetest.New(t)
	srv.Secret = secret
	srv.AddVM("pv1-1", 110, "old-worker", 4096, false, false)
	srv.AddVM("pv1-1", 111, "build-host", 2048, true, false)
	srv.AddVM("pv1-1", 9000, "ubuntu-2404-kube", 8192, false, true, "labctl", "labctl-image-ubuntu-2404-kube")
	data, err := os.ReadFile("../examples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lab := strings.NewReplacer("url: https://192.168.0.8:8006", "url: "+srv.URL,
		"caFile: ~/.config/labctl/pve-root-ca.pem", "fingerprint: "+proxmox.Fingerprint(srv.Certificate())).Replace(string(data))
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, []byte(lab), 0o600); err != nil {
		t.Fatal(err)
	}
	res := run(t, "doctor", "-vvv", "-c", path, "-o", "json")
	var rep struct {
		Checks   []struct{ Name, Status, Detail string }
		Capacity []struct {
			Cluster    string `json:"cluster"`
			MaxWorkers int    `json:"maxWorkers"`
		} `json:"capacity"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("not JSON (exit %d): %v\n%s\n%s", res.code, err, res.stdout, res.stderr)
	}
	if len(rep.Capacity) != 1 || rep.Capacity[0].MaxWorkers != 14 {
		t.Errorf("capacity %+v", rep.Capacity)
	}
	for _, c := range rep.Checks {
		if strings.HasPrefix(c.Name, "proxmox") || strings.HasPrefix(c.Name, "cluster") {
			if c.Status != "ok" {
				t.Errorf("%s: %s %s", c.Name, c.Status, c.Detail)
			}
		}
	}
	text := run(t, "doctor", "-vvv", "-c", path)
	if !strings.Contains(text.stdout, "max workers that fit: 14") {
		t.Errorf("text:\n%s", text.stdout)
	}
	for _, r := range []result{res, text} {
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Error("the token secret was printed")
		}
	}
}
