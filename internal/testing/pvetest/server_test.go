package pvetest

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// do sends one request with the token header (auth "" means the right one).
func do(t *testing.T, s *Server, method, path string, form url.Values, auth string) (int, map[string]any) {
	t.Helper()
	var body io.Reader
	u := s.URL + "/api2/json" + path
	if form != nil && (method == "POST" || method == "PUT") {
		body = strings.NewReader(form.Encode())
	} else if form != nil {
		u += "?" + form.Encode()
	}
	req, _ := http.NewRequest(method, u, body)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if auth == "" {
		auth = "PVEAPIToken=" + s.TokenID + "=" + s.Secret
	}
	req.Header.Set("Authorization", auth)
	res, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

func wantStatus(t *testing.T, s *Server, code int, method, path string, form url.Values, violation bool) map[string]any {
	t.Helper()
	got, out := do(t, s, method, path, form, "")
	if got != code {
		t.Errorf("%s %s %v: status %d, want %d (%v)", method, path, form, got, code, out)
	}
	if v := s.TakeViolations(); (len(v) > 0) != violation {
		t.Errorf("%s %s: violations %v, want any: %v", method, path, v, violation)
	}
	return out
}

func TestSchemaRejectsWhatPVERejects(t *testing.T) {
	s := New(t)
	wantStatus(t, s, 501, "GET", "/nodes/pv1-1/qemu/100/snapshotz", nil, true)
	wantStatus(t, s, 501, "PATCH", "/nodes/pv1-1/qemu", nil, true)
	wantStatus(t, s, 400, "GET", "/cluster/resources", url.Values{"type": {"container"}}, true)
	wantStatus(t, s, 400, "GET", "/cluster/resources", url.Values{"kind": {"vm"}}, true)
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/storage/local/download-url",
		url.Values{"content": {"snippets"}, "filename": {"u.yaml"}, "url": {"https://x/u.yaml"}}, true)
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"201"}, "cores": {"four"}}, true)
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"99"}}, true)
	// vlan is not a key of net[n]; tag is.
	out := wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"201"}, "net0": {"virtio,bridge=vmbr0,vlan=4"}}, true)
	if !strings.Contains(out["errors"].(map[string]any)["net0"].(string), "'vlan' is not defined") {
		t.Errorf("net0 error: %v", out)
	}
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"201"}, "tags": {"labctl;bad tag!"}}, true)
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"201"}, "sshkeys": {"ssh-ed25519 AAAA"}}, true)
	// Missing required parameter.
	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/storage/local/download-url", url.Values{"content": {"iso"}}, true)
	if n := len(s.VMs()); n != 0 {
		t.Errorf("rejected requests made %d VMs", n)
	}
}

func TestUploadOnlyISOVztmplImport(t *testing.T) {
	s := New(t)
	upload := func(content, name string, data []byte) int {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		_ = w.WriteField("content", content)
		fw, _ := w.CreateFormFile("filename", name)
		_, _ = fw.Write(data)
		_ = w.Close()
		req, _ := http.NewRequest("POST", s.URL+"/api2/json/nodes/pv1-1/storage/local/upload", &b)
		req.Header.Set("Content-Type", w.FormDataContentType())
		req.Header.Set("Authorization", "PVEAPIToken="+s.TokenID+"="+s.Secret)
		res, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := upload("snippets", "user-data.yaml", []byte("#cloud-config\n")); got != 400 {
		t.Errorf("snippets upload: %d, want 400", got)
	}
	if len(s.TakeViolations()) == 0 {
		t.Error("a snippets upload is not flagged")
	}
	if got := upload("iso", "seed.iso", []byte("not an iso")); got != 500 {
		t.Errorf("non-ISO bytes as iso: %d, want 500", got)
	}
	iso := make([]byte, 0x8800)
	copy(iso[0x8001:], "CD001")
	if got := upload("iso", "seed.iso", iso); got != 200 {
		t.Errorf("iso upload: %d", got)
	}
}

func TestAuthHeaderFormat(t *testing.T) {
	s := New(t)
	for _, h := range []string{
		"PVEAPIToken " + s.TokenID + "=" + s.Secret,
		"PVEAPIToken=" + s.TokenID + ":" + s.Secret,
		"PVEAPIToken=root@pam=" + s.Secret,
		"PVEAPIToken=" + s.TokenID + "=wrong",
		"Bearer " + s.Secret,
	} {
		if got, _ := do(t, s, "GET", "/version", nil, h); got != 401 {
			t.Errorf("%q: %d, want 401", h, got)
		}
	}
	if got, _ := do(t, s, "GET", "/version", nil, ""); got != 200 {
		t.Errorf("right header: %d", got)
	}
}

func TestVMRules(t *testing.T) {
	s := New(t)
	s.ServeURL("https://img.example/noble.qcow2", []byte("image"))
	out := wantStatus(t, s, 200, "POST", "/nodes/pv1-1/storage/local/download-url",
		url.Values{"content": {"import"}, "filename": {"noble.qcow2"}, "url": {"https://img.example/noble.qcow2"}}, false)
	upid := out["data"].(string)
	st := wantStatus(t, s, 200, "GET", "/nodes/pv1-1/tasks/"+upid+"/status", nil, false)
	if st["data"].(map[string]any)["status"] != "running" {
		t.Errorf("a new task is %v, want running", st["data"])
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st = wantStatus(t, s, 200, "GET", "/nodes/pv1-1/tasks/"+upid+"/status", nil, false)
		if st["data"].(map[string]any)["status"] == "stopped" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st["data"].(map[string]any)["exitstatus"] != "OK" {
		t.Fatalf("download task: %v", st)
	}
	// Another node does not know the task.
	wantStatus(t, s, 400, "GET", "/nodes/pv1-2/tasks/"+upid+"/status", nil, false)

	wantStatus(t, s, 400, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"201"}, "scsi0": {"local-lvm:8,import-from=local:import/noble.qcow2"}}, false)
	s.ServeURL("https://img.example/x.iso", []byte("iso"))
	s.AddVM("pv1-1", 150, "other", 0, true, false)
	wantStatus(t, s, 500, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"150"}}, false)
	wantStatus(t, s, 500, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"201"}, "scsi0": {"local-lvm:0,import-from=local:import/missing.qcow2"}}, false)
	wantStatus(t, s, 500, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"201"}, "scsi0": {"local:0,import-from=local:import/noble.qcow2"}}, false)
	wantStatus(t, s, 200, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {"201"}, "scsi0": {"local-lvm:0,import-from=local:import/noble.qcow2"}}, false)
	// A running VM cannot be deleted.
	out = wantStatus(t, s, 500, "DELETE", "/nodes/pv1-1/qemu/150", url.Values{"purge": {"1"}}, false)
	if !strings.Contains(out["message"].(string), "is running") {
		t.Errorf("delete running: %v", out)
	}
	if got := s.Requests(); got[len(got)-1].Path != "/nodes/{node}/qemu/{vmid}" || got[len(got)-1].Status != 500 {
		t.Errorf("request log: %+v", got[len(got)-1])
	}
}

// waitTask polls a task until it stops and returns its exit status.
func waitTask(t *testing.T, s *Server, upid string) string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		st := wantStatus(t, s, 200, "GET", "/nodes/pv1-1/tasks/"+upid+"/status", nil, false)["data"].(map[string]any)
		if st["status"] == "stopped" {
			return st["exitstatus"].(string)
		}
	}
	t.Fatalf("task %s never stopped", upid)
	return ""
}

// TestDiskFormatAndTemplate: block storage takes raw disks only (PVE's
// LVM-thin plugin dies on any other format inside the create task), file
// storage takes qcow2; qm template needs a stopped VM and runs as a task.
func TestDiskFormatAndTemplate(t *testing.T) {
	s := New(t)
	s.AddStorage("pv1-1", "vmdata", "dir", "images")
	create := func(id, disk string) string {
		return wantStatus(t, s, 200, "POST", "/nodes/pv1-1/qemu", url.Values{"vmid": {id}, "scsi0": {disk}}, false)["data"].(string)
	}
	if exit := waitTask(t, s, create("301", "local-lvm:20,format=qcow2")); exit != "unable to create VM 301 - unsupported format 'qcow2'" {
		t.Errorf("qcow2 on lvmthin: %q", exit)
	}
	if len(s.VMs()) != 0 {
		t.Errorf("a failed create left %+v", s.VMs())
	}
	for id, disk := range map[string]string{"302": "local-lvm:20,format=raw", "303": "vmdata:20,format=qcow2"} {
		if exit := waitTask(t, s, create(id, disk)); exit != "OK" {
			t.Errorf("%s: %q", disk, exit)
		}
	}
	s.AddVM("pv1-1", 304, "running", 0, true, false)
	wantStatus(t, s, 500, "POST", "/nodes/pv1-1/qemu/304/template", url.Values{}, false)
	upid := wantStatus(t, s, 200, "POST", "/nodes/pv1-1/qemu/302/template", url.Values{}, false)["data"].(string)
	if exit := waitTask(t, s, upid); exit != "OK" {
		t.Fatalf("qm template: %q", exit)
	}
	wantStatus(t, s, 500, "POST", "/nodes/pv1-1/qemu/302/template", url.Values{}, false)
	for _, v := range s.VMs() {
		if (v.Config["template"] == "1") != (v.ID == 302) {
			t.Errorf("VM %d template=%q", v.ID, v.Config["template"])
		}
	}
}
