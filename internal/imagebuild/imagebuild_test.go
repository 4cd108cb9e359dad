package imagebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/hypervisor/proxmox/pvetest"
	"github.com/labctl/labctl/internal/imagebuild/packertest"
	"github.com/labctl/labctl/internal/ui"
)

type bed struct {
	*packertest.Standin
	srv      *pvetest.Server
	cfg      string
	builder  string
	bin      string
	pidFile  string
	varsCopy string
	state    string
	out, err bytes.Buffer
}

func newBed(t *testing.T) *bed {
	t.Helper()
	st := packertest.New(t)
	b := &bed{Standin: st, srv: pvetest.New(t), builder: st.Builder, bin: st.Bin, pidFile: st.PIDFile, varsCopy: st.VarsCopy}
	tmp := t.TempDir()
	b.state = filepath.Join(tmp, "xdg")
	t.Setenv("XDG_CONFIG_HOME", b.state)
	t.Setenv("PVE_TOKEN_SECRET", b.srv.Secret)

	raw, err := os.ReadFile("../../examples/lab.yaml")
	must(t, err)
	var doc map[string]any
	must(t, yaml.Unmarshal(raw, &doc))
	pve := doc["hypervisors"].([]any)[0].(map[string]any)["proxmox"].(map[string]any)
	pve["url"] = b.srv.URL
	pve["tls"] = map[string]any{"fingerprint": proxmox.Fingerprint(b.srv.Certificate())}
	doc["network"].(map[string]any)["vlan"] = 4
	img := doc["images"].([]any)[0].(map[string]any)
	img["imageBuilder"] = b.builder
	delete(doc, "clusters")
	out, err := yaml.Marshal(doc)
	must(t, err)
	b.cfg = filepath.Join(tmp, "lab.yaml")
	must(t, os.WriteFile(b.cfg, out, 0o644))
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (b *bed) opts(mode string, dry bool) BuildOptions {
	return BuildOptions{
		IO: &ui.IO{In: strings.NewReader(""), Out: &b.out, Err: &b.err}, Request: config.Request{Path: b.cfg, Explicit: true},
		DryRun: dry, Verbose: 3,
		Environ: append(b.Env(mode), "PATH="+b.Path(), "PROXMOX_TOKEN=inherited-must-be-dropped", "PACKER_FLAGS=-var=lost"),
	}
}

// noSecret fails when the token secret is in any output, log or var file.
func (b *bed) noSecret(t *testing.T) {
	t.Helper()
	for name, s := range map[string]string{"stdout": b.out.String(), "stderr": b.err.String()} {
		if strings.Contains(s, b.srv.Secret) {
			t.Errorf("token secret in %s:\n%s", name, s)
		}
	}
	files, _ := filepath.Glob(filepath.Join(b.state, "labctl", "*", "images", "*"))
	files = append(files, b.varsCopy)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil && bytes.Contains(data, []byte(b.srv.Secret)) {
			t.Errorf("token secret in %s", f)
		}
	}
}

func (b *bed) logFile(t *testing.T) string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(b.state, "labctl", "*", "images", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("want one build log, found %v", logs)
	}
	st, err := os.Stat(logs[0])
	must(t, err)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v, want 0600", st.Mode().Perm())
	}
	return logs[0]
}

func TestBuildTagsTheArtifactOnPVE(t *testing.T) {
	b := newBed(t)
	// What Packer's proxmox-iso builder leaves behind: a template tagged
	// with the Kubernetes semver.
	b.srv.AddVM("pv1-1", 105, "ubuntu-2404-kube-v1.35.4", 2048, false, true, "v1.35.4")
	if err := Build(context.Background(), b.opts("ok", false)); err != nil {
		t.Fatalf("%v\n%s", err, b.err.String())
	}
	var vm *pvetest.VM
	for _, v := range b.srv.VMs() {
		if v.ID == 105 {
			vm = &v
		}
	}
	want := []string{"v1.35.4", "labctl", "labctl-image-ubuntu-2404-kube", "kubernetes-v1.35.4"}
	if vm == nil || !slices.Equal(vm.Tags(), want) {
		t.Fatalf("template 105 tags %v, want %v", vm.Tags(), want)
	}
	// The var file has image-builder's variable names and our values.
	var vars map[string]string
	data, err := os.ReadFile(b.varsCopy)
	must(t, err)
	must(t, json.Unmarshal(data, &vars))
	wantVars := map[string]string{"kubernetes_semver": "v1.35.4", "kubernetes_series": "v1.35", "kubernetes_deb_version": "1.35.4-1.1",
		"node": "pv1-1", "iso_storage_pool": "local", "storage_pool": "local-lvm", "bridge": "vmbr0", "vlan_tag": "4"}
	for k, v := range wantVars {
		if vars[k] != v {
			t.Errorf("var %s = %q, want %q", k, vars[k], v)
		}
	}
	if len(vars) != len(wantVars) {
		t.Errorf("var file has %v, want exactly %v", vars, wantVars)
	}
	log, err := os.ReadFile(b.logFile(t))
	must(t, err)
	for _, w := range []string{"artifact,0,id,105", `ui,say,\n==> Builds finished. The artifacts`, "token <redacted> for root@pam!labctl at " + b.srv.URL + "/api2/json"} {
		if !bytes.Contains(log, []byte(w)) {
			t.Errorf("log lacks %q:\n%s", w, log)
		}
	}
	if !strings.Contains(b.err.String(), "template 105 on pv1-1 tagged") {
		t.Errorf("stderr lacks the result:\n%s", b.err.String())
	}
	b.noSecret(t)

	// A second run finds the tagged template and builds nothing.
	b.srv.ResetRequests()
	must(t, os.Remove(b.varsCopy))
	if err := Build(context.Background(), b.opts("fail", false)); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if b.srv.Writes() != 0 {
		t.Errorf("second run wrote %d times", b.srv.Writes())
	}
	if _, err := os.Stat(b.varsCopy); err == nil {
		t.Error("second run ran packer")
	}

	// image list shows it.
	var out bytes.Buffer
	lo := ListOptions{IO: &ui.IO{Out: &out, Err: &bytes.Buffer{}}, Request: config.Request{Path: b.cfg, Explicit: true}, Output: "json"}
	must(t, List(context.Background(), lo))
	var rows []Template
	must(t, json.Unmarshal(out.Bytes(), &rows))
	if len(rows) != 1 || rows[0].VMID != 105 || rows[0].Image != "ubuntu-2404-kube" || rows[0].Kubernetes != "v1.35.4" || rows[0].Hypervisor != "pve" {
		t.Errorf("image list -o json: %s", out.String())
	}
	out.Reset()
	lo.Output = "text"
	must(t, List(context.Background(), lo))
	if !strings.Contains(out.String(), "labctl-image-ubuntu-2404-kube") || !strings.Contains(out.String(), "105") {
		t.Errorf("image list:\n%s", out.String())
	}
}

func TestBuildFailureNamesLastErrorAndLog(t *testing.T) {
	b := newBed(t)
	err := Build(context.Background(), b.opts("fail", false))
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("want a BuildError, got %v", err)
	}
	log := b.logFile(t)
	msg := err.Error()
	for _, w := range []string{"--> proxmox-iso.ubuntu-2404: error creating VM: 500 storage 'local-lvm' does not exist, token <redacted>", log} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q: %s", w, msg)
		}
	}
	if strings.Contains(msg, b.srv.Secret) {
		t.Errorf("secret in error: %s", msg)
	}
	if b.srv.Writes() != 0 {
		t.Errorf("a failed build tagged something (%d writes)", b.srv.Writes())
	}
	b.noSecret(t)
}

func TestBuildInterruptStopsTheGroup(t *testing.T) {
	b := newBed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- Build(ctx, b.opts("hang", false)) }()
	var pid int
	for deadline := time.Now().Add(20 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the stand-in packer never started\n%s", b.err.String())
		}
		if data, err := os.ReadFile(b.pidFile); err == nil && len(data) > 1 {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
	}
	// Secrets are not in the argv of packer or of make, its parent.
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	must(t, err)
	ppid := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))[1]
	for _, p := range []string{strconv.Itoa(pid), ppid} {
		cmdline, err := os.ReadFile("/proc/" + p + "/cmdline")
		must(t, err)
		if bytes.Contains(cmdline, []byte(b.srv.Secret)) || len(cmdline) == 0 {
			t.Errorf("argv of %s: %q", p, cmdline)
		}
		environ, err := os.ReadFile("/proc/" + p + "/environ")
		must(t, err)
		if !bytes.Contains(environ, []byte("PROXMOX_TOKEN="+b.srv.Secret+"\x00")) || bytes.Contains(environ, []byte("inherited-must-be-dropped")) ||
			bytes.Contains(environ, []byte("PACKER_FLAGS")) {
			t.Errorf("environment of %s lacks the token or keeps inherited PROXMOX_/PACKER_FLAGS", p)
		}
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Build did not return after cancel")
	}
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stand-in packer %d still running after cancel", pid)
		}
	}
	if log, _ := os.ReadFile(b.logFile(t)); !bytes.Contains(log, []byte("Build cancelled")) {
		t.Errorf("packer did not get SIGINT; log:\n%s", log)
	}
	b.noSecret(t)
}

func TestDryRunShowsNamesNotValues(t *testing.T) {
	b := newBed(t)
	if err := Build(context.Background(), b.opts("fail", true)); err != nil {
		t.Fatalf("%v\n%s", err, b.err.String())
	}
	out := b.out.String()
	for _, w := range []string{`"kubernetes_semver": "v1.35.4"`, "PROXMOX_TOKEN", "PROXMOX_URL", "PACKER_VAR_FILES=",
		"make build-proxmox-ubuntu-2404", filepath.Join(b.builder, "images", "capi")} {
		if !strings.Contains(out, w) {
			t.Errorf("dry run lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "api2/json") || strings.Contains(out, "root@pam") {
		t.Errorf("dry run shows env values:\n%s", out)
	}
	if _, err := os.Stat(b.pidFile); err == nil || b.srv.Writes() != 0 {
		t.Error("dry run ran packer or changed PVE")
	}
	b.noSecret(t)
}

func TestPrereqsAndMissingBuilder(t *testing.T) {
	b := newBed(t)
	must(t, os.Remove(filepath.Join(b.bin, "ansible-playbook")))
	must(t, os.WriteFile(filepath.Join(b.bin, "packer"), []byte("#!/bin/sh\necho 'Packer v1.11.2'\n"), 0o755))
	err := Build(context.Background(), b.opts("ok", false))
	for _, w := range []string{"ansible-playbook not found on PATH", "packer 1.11.2, but image-builder pins 1.9.5"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
	o := b.opts("ok", false)
	o.ImageBuilder = filepath.Join(t.TempDir(), "nowhere")
	err = Build(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "git clone --branch v0.1.46 --depth 1 https://github.com/kubernetes-sigs/image-builder") {
		t.Errorf("missing image-builder: %v", err)
	}
}

func TestParseLine(t *testing.T) {
	l, ok := ParseLine("1732950000,proxmox-iso.x,artifact,0,id,105\n")
	if id, isArt := l.Artifact(); !ok || !isArt || id != "105" {
		t.Errorf("artifact: %+v", l)
	}
	l, _ = ParseLine(`1,,ui,error,a%!(PACKER_COMMA) b\nsecond`)
	if msg, isErr, ok := l.Message(); !ok || !isErr || msg != "a, b\nsecond" {
		t.Errorf("message %q", msg)
	}
	if _, ok := ParseLine("make: *** [Makefile:2: build] Error 1"); ok {
		t.Error("plain line parsed as machine-readable")
	}
}
