package imagebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/testing/packertest"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/ui"
)

// TestMain lets the test binary stand in for packer and ansible when the
// real image-builder Makefile runs them (see packertest).
func TestMain(m *testing.M) {
	if packertest.IsStandin() {
		os.Exit(packertest.Main(os.Args))
	}
	os.Exit(m.Run())
}

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

// newBed is lab.yaml's example pointed at a strict fake PVE, with a copy of
// image-builder v0.1.46's images/capi as the checkout. edit changes the
// parsed lab.yaml before it is written.
func newBed(t *testing.T, edit ...func(doc map[string]any)) *bed {
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
	b.cfg = writeLab(t, filepath.Join(tmp, "lab.yaml"), doc, edit...)
	return b
}

// writeLab applies edit to a parsed lab.yaml and writes it to path.
func writeLab(t *testing.T, path string, doc map[string]any, edit ...func(doc map[string]any)) string {
	t.Helper()
	for _, e := range edit {
		e(doc)
	}
	out, err := yaml.Marshal(doc)
	must(t, err)
	must(t, os.WriteFile(path, out, 0o644))
	return path
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (b *bed) opts(mode string, dry bool) BuildOptions {
	io, _, _, _ := ui.Test()
	io.Out, io.Err = &b.out, &b.err // every run's output, in order
	return BuildOptions{
		IO: io, Lab: b.lab(), Driver: b.driver(),
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

// templates are the fake PVE's templates called name.
func (b *bed) templates(name string) []pvetest.VM {
	var out []pvetest.VM
	for _, v := range b.srv.VMs() {
		if v.Config["template"] == "1" && v.Name() == name {
			out = append(out, v)
		}
	}
	return out
}

// varFile is the var file labctl handed to image-builder, as the stand-in
// packer received it.
func (b *bed) varFile(t *testing.T) map[string]string {
	t.Helper()
	var vars map[string]string
	data, err := os.ReadFile(b.varsCopy)
	must(t, err)
	must(t, json.Unmarshal(data, &vars))
	return vars
}

var wantTags = []string{"labctl", "labctl-image-ubuntu-2404-kube", "kubernetes-v1.35.4"}

// TestBuildThroughImageBuilderMakefile runs image build through
// image-builder v0.1.46's own Makefile (deps-proxmox, set-ssh-password,
// then packer build without -machine-readable): packer answers in its human
// UI only, and the template must still be found and tagged.
func TestBuildThroughImageBuilderMakefile(t *testing.T) {
	b := newBed(t)
	if err := Build(context.Background(), b.opts("ok", false)); err != nil {
		t.Fatalf("%v\n%s", err, b.err.String())
	}
	ts := b.templates("ubuntu-2404-kube-v1.35.4")
	if len(ts) != 1 || !slices.Equal(ts[0].Tags(), wantTags) {
		t.Fatalf("templates named ubuntu-2404-kube-v1.35.4: %+v, want one tagged %v\n%s", ts, wantTags, b.err.String())
	}
	id := ts[0].ID
	if !strings.Contains(b.err.String(), "template "+strconv.Itoa(id)+" on pv1-1 tagged labctl;") {
		t.Errorf("stderr lacks the result:\n%s", b.err.String())
	}
	log, err := os.ReadFile(b.logFile(t))
	must(t, err)
	for _, w := range []string{
		"Packer version is as expected",                        // hack/ensure-packer.sh ran
		"Nothing to do. All requested collections are already", // hack/ensure-ansible.sh ran
		"--> ubuntu-2404: A template was created: " + strconv.Itoa(id),
		"token <redacted>",
	} {
		if !bytes.Contains(log, []byte(w)) {
			t.Errorf("log lacks %q:\n%s", w, log)
		}
	}
	// The real Makefile gives packer no -machine-readable, so none of its
	// lines may be machine-readable, and no colour code reaches the log.
	if regexp.MustCompile(`(?m)^\d+,[^,]*,(ui|artifact),`).Match(log) || bytes.Contains(log, []byte("\x1b[")) {
		t.Errorf("log has machine-readable lines or colour codes:\n%s", log)
	}
	b.noSecret(t)

	// A second run finds the tagged template and builds nothing.
	b.srv.ResetRequests()
	must(t, os.Remove(b.varsCopy))
	if err := Build(context.Background(), b.opts("ok", false)); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if b.srv.Writes() != 0 {
		t.Errorf("second run wrote %d times", b.srv.Writes())
	}
	if _, err := os.Stat(b.varsCopy); err == nil {
		t.Error("second run ran packer")
	}
	if n := len(b.templates("ubuntu-2404-kube-v1.35.4")); n != 1 {
		t.Errorf("%d templates after the second run, want 1", n)
	}

	// image list shows it.
	io, _, out, _ := ui.Test()
	lo := ListOptions{IO: io, Lab: b.lab(), Driver: b.driver(), Output: "json"}
	must(t, List(context.Background(), lo))
	var rows []Template
	must(t, json.Unmarshal(out.Bytes(), &rows))
	if len(rows) != 1 || rows[0].VMID != id || rows[0].Image != "ubuntu-2404-kube" || rows[0].Kubernetes != "v1.35.4" || rows[0].Hypervisor != "pve" {
		t.Errorf("image list -o json: %s", out.String())
	}
	out.Reset()
	lo.Output = "text"
	must(t, List(context.Background(), lo))
	if !strings.Contains(out.String(), "labctl-image-ubuntu-2404-kube") || !strings.Contains(out.String(), strconv.Itoa(id)) {
		t.Errorf("image list:\n%s", out.String())
	}
}

// TestBuildTagsAnUntaggedLeftover: a template an earlier run built but
// never tagged (what labctl before this fix left after every build) is
// tagged, not built again.
func TestBuildTagsAnUntaggedLeftover(t *testing.T) {
	b := newBed(t)
	b.srv.AddVM("pv1-1", 105, "ubuntu-2404-kube-v1.35.4", 2048, false, true)
	b.srv.AddVM("pv1-1", 106, "ubuntu-2404-kube-v1.34.0", 2048, false, true)
	if err := Build(context.Background(), b.opts("ok", false)); err != nil {
		t.Fatalf("%v\n%s", err, b.err.String())
	}
	if _, err := os.Stat(b.varsCopy); err == nil {
		t.Error("packer ran although the template was there")
	}
	if !strings.Contains(b.err.String(), "use template 105 (ubuntu-2404-kube-v1.35.4), which an earlier build left untagged") {
		t.Errorf("stderr does not say the leftover is used:\n%s", b.err.String())
	}
	for _, v := range b.srv.VMs() {
		if want := v.ID == 105; slices.Equal(v.Tags(), wantTags) != want {
			t.Errorf("VM %d %s has tags %v", v.ID, v.Name(), v.Tags())
		}
	}

	// Two leftovers: labctl cannot tell which to keep, and says so.
	b = newBed(t)
	b.srv.AddVM("pv1-1", 105, "ubuntu-2404-kube-v1.35.4", 2048, false, true)
	b.srv.AddVM("pv1-1", 107, "ubuntu-2404-kube-v1.35.4", 2048, false, true)
	err := Build(context.Background(), b.opts("ok", false))
	if err == nil || !strings.Contains(err.Error(), "2 templates named ubuntu-2404-kube-v1.35.4 (VMIDs 105, 107)") {
		t.Errorf("two leftovers: %v", err)
	}
	if b.srv.Writes() != 0 {
		t.Errorf("two leftovers: %d writes", b.srv.Writes())
	}
}

// TestBuildDiskFormatFromStorageType: image-builder's template defaults
// disk_format to qcow2, which PVE's LVM-thin storage refuses; labctl sets
// it from the storage type the API reports.
func TestBuildDiskFormatFromStorageType(t *testing.T) {
	for _, c := range []struct {
		storage, typ, want string
	}{
		{"local-lvm", "lvmthin", "raw"}, // the owner's lab
		{"vmdata", "dir", "qcow2"},
	} {
		t.Run(c.typ, func(t *testing.T) {
			b := newBed(t, func(doc map[string]any) {
				node := doc["hypervisors"].([]any)[0].(map[string]any)["proxmox"].(map[string]any)["nodes"].([]any)[0].(map[string]any)
				node["storage"] = c.storage
			})
			b.srv.AddStorage("pv1-1", "vmdata", "dir", "images", "rootdir")
			if err := Build(context.Background(), b.opts("ok", false)); err != nil {
				t.Fatalf("%v\n%s", err, b.err.String())
			}
			vars := b.varFile(t)
			wantVars := map[string]string{"kubernetes_semver": "v1.35.4", "kubernetes_series": "v1.35", "kubernetes_deb_version": "1.35.4-1.1",
				"node": "pv1-1", "iso_storage_pool": "local", "storage_pool": c.storage, "bridge": "vmbr0", "vlan_tag": "4",
				"disk_format": c.want, "artifact_name": "ubuntu-2404-kube-v1.35.4"}
			for k, v := range wantVars {
				if vars[k] != v {
					t.Errorf("var %s = %q, want %q", k, vars[k], v)
				}
			}
			if len(vars) != len(wantVars) {
				t.Errorf("var file has %v, want exactly %v", vars, wantVars)
			}
			ts := b.templates("ubuntu-2404-kube-v1.35.4")
			if len(ts) != 1 || !strings.HasSuffix(ts[0].Config["scsi0"], ",format="+c.want) || !strings.HasPrefix(ts[0].Config["scsi0"], c.storage+":") {
				t.Errorf("template disk: %+v", ts)
			}
		})
	}
}

func TestBuildFailureNamesLastErrorAndLog(t *testing.T) {
	b := newBed(t)
	b.srv.FailTasks(http.MethodPost, "/nodes/{node}/qemu", 1, "unable to create VM 100 - storage 'local-lvm' is not online")
	err := Build(context.Background(), b.opts("ok", false))
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("want a BuildError, got %v", err)
	}
	log := b.logFile(t)
	msg := err.Error()
	for _, w := range []string{"--> ubuntu-2404: error creating VM: unable to create VM 100 - storage 'local-lvm' is not online", log} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q: %s", w, msg)
		}
	}
	if strings.Contains(msg, b.srv.Secret) {
		t.Errorf("secret in error: %s", msg)
	}
	for _, r := range b.srv.Requests() {
		if r.Method == http.MethodPut {
			t.Errorf("a failed build changed a VM: %s %s", r.Method, r.Raw)
		}
	}
	if len(b.srv.VMs()) != 0 {
		t.Errorf("VMs left: %+v", b.srv.VMs())
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
	for deadline := time.Now().Add(60 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
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
			bytes.Contains(environ, []byte("PACKER_FLAGS=-var=lost")) {
			t.Errorf("environment of %s lacks the token or keeps inherited PROXMOX_/PACKER_FLAGS", p)
		}
	}
	// Wait for the build VM, so that cancelling has one to clean up.
	for deadline := time.Now().Add(20 * time.Second); len(b.srv.VMs()) == 0 || !b.srv.VMs()[0].Running; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stand-in packer made no running VM")
		}
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Build did not return after cancel")
	}
	for deadline := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stand-in packer %d still running after cancel", pid)
		}
	}
	if log, _ := os.ReadFile(b.logFile(t)); !bytes.Contains(log, []byte("Cleanly cancelled builds after being interrupted.")) {
		t.Errorf("packer did not get SIGINT; log:\n%s", log)
	}
	if vms := b.srv.VMs(); len(vms) != 0 {
		t.Errorf("half-made VM left after cancel: %+v", vms)
	}
	b.noSecret(t)
}

func TestDryRunShowsNamesNotValues(t *testing.T) {
	b := newBed(t)
	if err := Build(context.Background(), b.opts("ok", true)); err != nil {
		t.Fatalf("%v\n%s", err, b.err.String())
	}
	out := b.out.String()
	for _, w := range []string{`"kubernetes_semver": "v1.35.4"`, `"disk_format": "raw"`, "PROXMOX_TOKEN", "PROXMOX_URL", "PACKER_VAR_FILES=",
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

// TestDryRunUnchecked: the dry run asks PVE for the template and the
// storage's format. Without the token, or with PVE out of reach, it
// still prints the plan, and marks what it could not check and why.
func TestDryRunUnchecked(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	refused := "https://" + l.Addr().String()
	l.Close()
	for _, tc := range []struct {
		name, why string
		edit      func(t *testing.T, b *bed) *bed
	}{
		{"without the token secret", "PVE_TOKEN_SECRET", func(t *testing.T, b *bed) *bed { os.Unsetenv("PVE_TOKEN_SECRET"); return b }},
		{"unreachable", "the connection was refused", func(t *testing.T, _ *bed) *bed {
			return newBed(t, func(doc map[string]any) {
				doc["hypervisors"].([]any)[0].(map[string]any)["proxmox"].(map[string]any)["url"] = refused
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.edit(t, newBed(t))
			url := b.lab().Hypervisors[0].Proxmox.URL
			if err := Build(context.Background(), b.opts("ok", true)); err != nil {
				t.Fatalf("dry run: %v\n%s", err, b.err.String())
			}
			notReached := "Proxmox VE hypervisor pve (" + url + ") was not reached: "
			for _, want := range []string{"make build-proxmox-ubuntu-2404", "# disk_format: not checked (the type of storage local-lvm decides it): " + notReached} {
				if !strings.Contains(b.out.String(), want) || !strings.Contains(b.out.String(), tc.why) {
					t.Errorf("stdout lacks %q or %q:\n%s", want, tc.why, b.out.String())
				}
			}
			for _, want := range []string{"would: run make build-proxmox-ubuntu-2404 in ", ", unless the template is there already (not checked: " + notReached, "would: tag the new template labctl, "} {
				if !strings.Contains(b.err.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, b.err.String())
				}
			}
			if _, err := os.Stat(b.pidFile); err == nil {
				t.Error("the dry run ran packer")
			}
			b.noSecret(t)
		})
	}
}

func TestPrereqsAndMissingBuilder(t *testing.T) {
	b := newBed(t)
	must(t, os.Remove(filepath.Join(b.bin, "ansible-playbook")))
	// The stand-ins are links to the test binary: replace, never write through.
	must(t, os.Remove(filepath.Join(b.bin, "packer")))
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

// TestStandinPackerOutputModes checks the stand-in against packer 1.9.5's
// rule: machine-readable lines only with -machine-readable in its own
// argv, the human UI otherwise.
func TestStandinPackerOutputModes(t *testing.T) {
	st := packertest.New(t)
	srv := pvetest.New(t)
	tpl := filepath.Join(st.Builder, "images", "capi", "packer", "proxmox", "packer.json.tmpl")
	vars := filepath.Join(t.TempDir(), "vars.json")
	must(t, os.WriteFile(vars, []byte(`{"kubernetes_semver":"v1.35.4","build_name":"ubuntu-2404","storage_pool":"local-lvm","disk_format":"raw","node":"pv1-1"}`), 0o600))
	run := func(args ...string) string {
		cmd := exec.Command(filepath.Join(st.Bin, "packer"), args...)
		cmd.Env = []string{"PROXMOX_URL=" + srv.URL + "/api2/json", "PROXMOX_USERNAME=" + srv.TokenID, "PROXMOX_TOKEN=" + srv.Secret,
			"PROXMOX_BRIDGE=vmbr0", "PROXMOX_ISO_POOL=local", "STANDIN_MODE=ok"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("packer %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	human := run("build", "-color=true", "-var-file="+vars, tpl)
	machine := run("-machine-readable", "build", "-var-file="+vars, tpl)
	machineLine := regexp.MustCompile(`(?m)^\d+,[^,]*,[a-z-]+,`)
	if machineLine.MatchString(human) || !strings.Contains(human, "\033[1;32m==> ubuntu-2404: Creating VM\033[0m") ||
		!regexp.MustCompile(`(?m)^--> ubuntu-2404: A template was created: \d+$`).MatchString(human) {
		t.Errorf("human UI:\n%s", human)
	}
	if !regexp.MustCompile(`(?m)^\d+,ubuntu-2404,artifact,0,id,\d+$`).MatchString(machine) || strings.Contains(machine, "\n--> ") ||
		!strings.Contains(machine, ",,ui,say,==> ubuntu-2404: Creating VM\n") {
		t.Errorf("machine-readable UI:\n%s", machine)
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

// lab loads the bed's lab.yaml, as the command factory's Lab does.
func (b *bed) lab() *config.Lab {
	lab, _, err := config.Load(context.Background(), config.Request{Path: b.cfg, Explicit: true})
	if err != nil {
		panic(err) // the bed wrote a valid config; a broken one is a bug in the test
	}
	return lab
}

// driver is the command factory's Driver for the bed's lab.
func (b *bed) driver() func(context.Context, string) (hypervisor.Driver, error) {
	lab := b.lab()
	return func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) }
}
