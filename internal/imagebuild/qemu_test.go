package imagebuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/packertest"
	"github.com/labctl/labctl/internal/ui"
)

// kvmBed is a lab of two libvirt hosts, each a test-owned libvirtd with
// libvirt's real storage driver (a directory pool, real volume streams),
// and a copy of image-builder v0.1.46 whose QEMU target runs through its
// real Makefile with the stand-in packer.
type kvmBed struct {
	*packertest.Standin
	hosts    map[string]*libvirttest.Daemon
	pools    map[string]string // the pool folder of each host
	cfg      string
	state    string
	out, err bytes.Buffer
	// wrap, when set, wraps each opened host (a test's hook).
	wrap func(name string, d *libvirt.Driver) hypervisor.Driver
}

const (
	kvmVolume = "ubuntu-2404-kube-v1.35.4.qcow2"
	kvmOut    = "ubuntu-2404-kube-v1.35.4"
)

// newKVMBed starts the hosts kvm1 and kvm2 with the pool "images" and
// writes lab.yaml; edit changes the parsed lab.yaml before it is written.
func newKVMBed(t *testing.T, so map[string]libvirttest.StorageOptions, edit ...func(doc map[string]any)) *kvmBed {
	t.Helper()
	st := packertest.New(t)
	b := &kvmBed{Standin: st, hosts: map[string]*libvirttest.Daemon{}, pools: map[string]string{}}
	tmp := t.TempDir()
	b.state = filepath.Join(tmp, "xdg")
	t.Setenv("XDG_CONFIG_HOME", b.state)
	var hvs []any
	for _, name := range []string{"kvm1", "kvm2"} {
		d := libvirttest.StartStorage(t, so[name])
		b.hosts[name] = d
		b.pools[name] = filepath.Join(d.Dir, "pool")
		if d.SmallPool != "" {
			b.pools[name] = d.SmallPool
		}
		// The pool as 'mgmt up' defines it.
		drv, err := libvirt.New(t.Context(), libvirt.Options{Name: name, URI: d.URI(), Pool: "images", PoolPath: b.pools[name], Bridge: "br0"})
		must(t, err)
		must(t, drv.PrepareHost(t.Context()))
		must(t, drv.Close())
		hvs = append(hvs, map[string]any{"name": name, "libvirt": map[string]any{"uri": d.URI(), "storagePool": "images", "bridge": "br0"}})
	}
	doc := map[string]any{
		"apiVersion": "labctl.dev/v1alpha1", "kind": "Lab", "metadata": map[string]any{"name": "kvm"},
		"hypervisors": hvs,
		"network":     map[string]any{"cidr": "10.213.0.0/24", "gateway": "10.213.0.1", "dns": []any{"10.213.0.1"}},
		"management":  map[string]any{"hypervisor": "kvm1", "ip": "10.213.0.10", "sshPublicKeyFile": "~/.ssh/id_ed25519.pub"},
		"images":      []any{map[string]any{"name": "ubuntu-2404-kube", "hypervisor": "kvm1", "imageBuilder": st.Builder}},
	}
	b.cfg = writeLab(t, filepath.Join(tmp, "lab.yaml"), doc, edit...)
	return b
}

func (b *kvmBed) lab(t *testing.T) *config.Lab {
	t.Helper()
	lab, _, err := config.Load(context.Background(), config.Request{Path: b.cfg, Explicit: true})
	must(t, err)
	return lab
}

func (b *kvmBed) opts(t *testing.T, mode string, dry bool) BuildOptions {
	b.out.Reset()
	b.err.Reset()
	lab := b.lab(t)
	io, _, _, _ := ui.Test()
	io.Out, io.Err = &b.out, &b.err
	return BuildOptions{
		IO: io, Lab: lab, DryRun: dry, Verbose: 3,
		Driver: func(ctx context.Context, name string) (hypervisor.Driver, error) {
			d, err := drivers.Open(ctx, lab, name)
			if err != nil || b.wrap == nil {
				return d, err
			}
			return b.wrap(name, d.(*libvirt.Driver)), nil
		},
		Environ: append(b.Env(mode), "PATH="+b.Path()),
	}
}

// qcow2 is the build's output, where labctl told Packer to put it.
func (b *kvmBed) qcow2() string {
	return filepath.Join(b.Builder, "images", "capi", "output", kvmOut, kvmVolume)
}

// volume reads host's volume file straight from its pool folder.
func (b *kvmBed) volume(t *testing.T, host string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.pools[host], kvmVolume))
	if err != nil {
		t.Fatalf("host %s: %v", host, err)
	}
	return data
}

// poolFiles lists host's pool folder.
func (b *kvmBed) poolFiles(t *testing.T, host string) []string {
	t.Helper()
	ents, err := os.ReadDir(b.pools[host])
	must(t, err)
	var out []string
	for _, e := range ents {
		if e.Name() != "lost+found" {
			out = append(out, e.Name())
		}
	}
	return out
}

// virt is a plain libvirt client on host, for what a test does by hand
// (virsh's part).
func (b *kvmBed) virt(t *testing.T, host string) (*lv.Libvirt, lv.StoragePool) {
	t.Helper()
	c, err := net.Dial("unix", b.hosts[host].Sock)
	must(t, err)
	l := lv.NewWithDialer(dialers.NewAlreadyConnected(c))
	must(t, l.ConnectToURI("storage:///system"))
	t.Cleanup(func() { _ = l.Disconnect() })
	p, err := l.StoragePoolLookupByName("images")
	must(t, err)
	return l, p
}

func (b *kvmBed) build(t *testing.T, o BuildOptions) {
	t.Helper()
	if err := Build(context.Background(), o); err != nil {
		t.Fatalf("%v\n%s", err, b.err.String())
	}
}

// TestQEMUImageToTwoHosts: image build on libvirt hosts runs image-builder
// v0.1.46's real Makefile (deps-qemu, set-ssh-password, packer build of
// packer/qemu/packer.json) into a qcow2, uploads it to both hosts' pools
// as the volume a LibvirtMachineTemplate names, checked by sha256, and a
// second run changes nothing.
func TestQEMUImageToTwoHosts(t *testing.T) {
	b := newKVMBed(t, nil)
	b.build(t, b.opts(t, "ok", false))

	// What labctl handed image-builder, as the stand-in packer got it.
	var vars map[string]string
	data, err := os.ReadFile(b.VarsCopy)
	must(t, err)
	must(t, json.Unmarshal(data, &vars))
	outDir := filepath.Dir(b.qcow2())
	want := map[string]string{"kubernetes_semver": "v1.35.4", "kubernetes_series": "v1.35", "kubernetes_deb_version": "1.35.4-1.1",
		"artifact_name": kvmOut, "format": "qcow2", "output_directory": outDir, "vm_name": kvmVolume}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("var %s = %q, want %q", k, vars[k], v)
		}
	}
	if len(vars) != len(want) {
		t.Errorf("var file %v, want exactly %v", vars, want)
	}
	logs, _ := filepath.Glob(filepath.Join(b.state, "labctl", "kvm", "images", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("logs %v", logs)
	}
	log, err := os.ReadFile(logs[0])
	must(t, err)
	for _, w := range []string{
		"Packer version is as expected",                     // hack/ensure-packer.sh ran
		"packer/qemu/qemu-ubuntu-2404.json",                 // the Makefile's own var file for the target
		"==> qemu: Converting hard drive...",                // the stand-in QEMU builder ran
		"--> qemu: VM files in directory: " + outDir + "\n", // its artifact, in the human UI
	} {
		if !bytes.Contains(log, []byte(w)) {
			t.Errorf("log lacks %q:\n%s", w, log)
		}
	}

	// The qcow2 and its recorded sha256.
	img, err := os.ReadFile(b.qcow2())
	must(t, err)
	if !bytes.HasPrefix(img, []byte("QFI\xfb")) || len(img) < 4<<20 {
		t.Fatalf("%s is not the qcow2 the build wrote (%d bytes)", b.qcow2(), len(img))
	}
	sum, _, err := libvirt.FileSHA256(t.Context(), b.qcow2())
	must(t, err)
	if rec, _ := os.ReadFile(b.qcow2() + ".sha256"); string(rec) != sum+"  "+kvmVolume+"\n" {
		t.Errorf("recorded sha256 %q, want %q", rec, sum)
	}

	// Both hosts hold it, marked verified, and the libvirt provider's
	// lookup (FindImage, which wants the marker) finds it.
	for _, host := range []string{"kvm1", "kvm2"} {
		if !bytes.Equal(b.volume(t, host), img) {
			t.Errorf("host %s: the volume's bytes differ from the qcow2", host)
		}
		if files := b.poolFiles(t, host); len(files) != 2 || files[0] != kvmVolume || files[1] != kvmVolume+".sha256-"+sum {
			t.Errorf("host %s pool: %v", host, files)
		}
		lab := b.lab(t)
		d, err := drivers.Open(t.Context(), lab, host)
		must(t, err)
		if im, err := d.FindImage(t.Context(), hypervisor.ImageSpec{FileName: kvmVolume}); err != nil || im.Volume != filepath.Join(b.pools[host], kvmVolume) {
			t.Errorf("host %s: FindImage = %+v, %v", host, im, err)
		}
		_ = drivers.Close(d)
	}
	if !strings.Contains(b.err.String(), "volume "+kvmVolume+" (sha256 "+sum+") on kvm1, kvm2") {
		t.Errorf("stderr lacks the result:\n%s", b.err.String())
	}

	// A second run builds nothing and uploads nothing.
	must(t, os.Remove(b.VarsCopy))
	before := map[string]os.FileInfo{}
	for _, host := range []string{"kvm1", "kvm2"} {
		before[host], _ = os.Stat(filepath.Join(b.pools[host], kvmVolume))
	}
	b.build(t, b.opts(t, "ok", false))
	if _, err := os.Stat(b.VarsCopy); err == nil {
		t.Error("the second run ran packer")
	}
	for _, host := range []string{"kvm1", "kvm2"} {
		st, _ := os.Stat(filepath.Join(b.pools[host], kvmVolume))
		if !st.ModTime().Equal(before[host].ModTime()) {
			t.Errorf("the second run rewrote %s's volume", host)
		}
	}
	if n := strings.Count(b.err.String(), "up to date"); n != 4 {
		t.Errorf("second run: %d steps up to date, want 4 (prerequisites, build, two uploads):\n%s", n, b.err.String())
	}
}

// TestQEMUImageReplacesPartialVolumes: a volume an upload left without
// its marker, and a truncated one, are uploaded again; a corrupted one of
// the right size only with --verify; the hosts that hold the image are
// skipped.
func TestQEMUImageReplacesPartialVolumes(t *testing.T) {
	b := newKVMBed(t, nil)
	// kvm2 has a volume of the name that an upload cut off: some bytes,
	// no marker, as a killed labctl (or virsh vol-upload) leaves it.
	l, p := b.virt(t, "kvm2")
	xml := fmt.Sprintf("<volume><name>%s</name><capacity>1048576</capacity><target><format type='raw'/></target></volume>", kvmVolume)
	vol, err := l.StorageVolCreateXML(p, xml, 0)
	must(t, err)
	must(t, l.StorageVolUpload(vol, strings.NewReader("half an image"), 0, 13, 0))

	b.build(t, b.opts(t, "ok", false))
	img, err := os.ReadFile(b.qcow2())
	must(t, err)
	if !bytes.Equal(b.volume(t, "kvm2"), img) {
		t.Fatal("kvm2's partial volume was not replaced by the image")
	}
	if !strings.Contains(b.err.String(), "replace volume "+kvmVolume+", since it has no verified-upload marker") {
		t.Errorf("the run does not say why it replaced kvm2's volume:\n%s", b.err.String())
	}

	// Truncated on kvm1: uploaded again; kvm2 is skipped.
	must(t, os.Truncate(filepath.Join(b.pools["kvm1"], kvmVolume), int64(len(img)/2)))
	b.build(t, b.opts(t, "ok", false))
	if !bytes.Equal(b.volume(t, "kvm1"), img) {
		t.Fatal("kvm1's truncated volume was not uploaded again")
	}
	if !strings.Contains(b.err.String(), fmt.Sprintf("it holds %d bytes, the image %d (truncated", len(img)/2, len(img))) ||
		strings.Count(b.err.String(), "up to date") != 3 {
		t.Errorf("second run:\n%s", b.err.String())
	}

	// Corrupted in place, same size: the marker and the size match, so a
	// plain run skips it (documented), and --verify reads it back.
	f, err := os.OpenFile(filepath.Join(b.pools["kvm1"], kvmVolume), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("bitrot"), int64(len(img)-4096))
	must(t, err)
	must(t, f.Close())
	b.build(t, b.opts(t, "ok", false))
	if bytes.Equal(b.volume(t, "kvm1"), img) {
		t.Fatal("a plain run re-uploaded a volume whose marker and size match; docs say it is skipped")
	}
	o := b.opts(t, "ok", false)
	o.Verify = true
	b.build(t, o)
	if !bytes.Equal(b.volume(t, "kvm1"), img) {
		t.Fatal("--verify did not replace kvm1's corrupted volume")
	}
	if !strings.Contains(b.err.String(), "(corrupted)") {
		t.Errorf("--verify does not say the volume was corrupted:\n%s", b.err.String())
	}
}

// cancelling wraps a host so that its upload is cancelled once the first
// bytes went: Ctrl-C mid-upload.
type cancelling struct {
	*libvirt.Driver
	cancel context.CancelFunc
}

func (c cancelling) PutVolume(ctx context.Context, img libvirt.LocalImage, progress func(string, int64)) error {
	return c.Driver.PutVolume(ctx, img, func(what string, n int64) {
		progress(what, n)
		if what == "upload" && n > 0 && n < img.Size {
			c.cancel()
		}
	})
}

// TestQEMUImageUploadFailures: an interrupted upload leaves no volume; a
// host that does not answer, a missing pool or a full one are errors
// naming the host and the fix, and the other host still gets the image;
// a volume holding another verified build is never replaced.
func TestQEMUImageUploadFailures(t *testing.T) {
	b := newKVMBed(t, map[string]libvirttest.StorageOptions{"kvm2": {SmallPoolMiB: 2}}, func(doc map[string]any) {
		doc["images"].([]any)[0].(map[string]any)["hosts"] = []any{"kvm1"}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.wrap = func(name string, d *libvirt.Driver) hypervisor.Driver { return cancelling{Driver: d, cancel: cancel} }
	o := b.opts(t, "ok", false)
	o.Environ = append(o.Environ, "STANDIN_DISK_MIB=64")
	err := Build(ctx, o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v\n%s", err, b.err.String())
	}
	if files := b.poolFiles(t, "kvm1"); len(files) != 0 {
		t.Errorf("an interrupted upload left %v in kvm1's pool", files)
	}
	b.wrap = nil

	// kvm2's pool is a 2 MiB tmpfs: no room for the 64 MiB image.
	b = rehost(t, b, []any{"kvm1", "kvm2"})
	o = b.opts(t, "ok", false)
	o.Environ = append(o.Environ, "STANDIN_DISK_MIB=64")
	err = Build(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "host kvm2: upload "+kvmVolume+" to kvm2: plan: no room: pool images has ") ||
		!strings.Contains(err.Error(), "set hypervisors[kvm2].libvirt.storagePool to a pool with room") {
		t.Errorf("no room: %v", err)
	}
	if files := b.poolFiles(t, "kvm1"); len(files) != 2 {
		t.Errorf("kvm1 did not get the image while kvm2 had no room: %v", files)
	}
	if files := b.poolFiles(t, "kvm2"); len(files) != 0 {
		t.Errorf("kvm2's full pool holds %v", files)
	}

	// A missing pool, and a host that does not answer.
	b.hosts["kvm2"].Stop()
	err = Build(context.Background(), b.opts(t, "ok", false))
	if err == nil || !strings.Contains(err.Error(), "host kvm2: upload "+kvmVolume+" to kvm2: plan: libvirt hypervisor kvm2: connecting to storage:///system") {
		t.Errorf("host down: %v", err)
	}
	b = rehost(t, b, []any{"kvm1"}, func(doc map[string]any) {
		doc["hypervisors"].([]any)[0].(map[string]any)["libvirt"].(map[string]any)["storagePool"] = "nopool"
	})
	err = Build(context.Background(), b.opts(t, "ok", false))
	if err == nil || !strings.Contains(err.Error(), `storage pool "nopool" does not exist on kvm1: run 'labctl mgmt up' (it defines it) or set storagePool to an existing pool`) {
		t.Errorf("pool missing: %v", err)
	}

	// Another verified build in the volume: VMs may be backed by it.
	b = rehost(t, b, []any{"kvm1"}, func(doc map[string]any) {
		doc["hypervisors"].([]any)[0].(map[string]any)["libvirt"].(map[string]any)["storagePool"] = "images"
	})
	must(t, os.Remove(b.qcow2()+".sha256")) // the qcow2 is lost: the next run builds anew
	err = Build(context.Background(), b.opts(t, "ok", false))
	if err == nil || !strings.Contains(err.Error(), "is the verified upload of another build of this image") || !strings.Contains(err.Error(), "virsh vol-delete --pool images "+kvmVolume) {
		t.Errorf("another build: %v", err)
	}
}

// rehost rewrites the bed's lab.yaml with the image's hosts (and edits).
func rehost(t *testing.T, b *kvmBed, hosts []any, edit ...func(doc map[string]any)) *kvmBed {
	t.Helper()
	var doc map[string]any
	data, err := os.ReadFile(b.cfg)
	must(t, err)
	must(t, yaml.Unmarshal(data, &doc))
	doc["images"].([]any)[0].(map[string]any)["hosts"] = hosts
	writeLab(t, b.cfg, doc, edit...)
	return b
}

// TestQEMUImageDryRunAndFailedBuild: a dry run shows the var file and the
// command and changes nothing; a build whose guest never comes up fails
// with Packer's error and leaves neither output nor volume.
func TestQEMUImageDryRunAndFailedBuild(t *testing.T) {
	b := newKVMBed(t, nil)
	b.build(t, b.opts(t, "ok", true))
	for _, w := range []string{`"vm_name": "` + kvmVolume + `"`, `"output_directory": "` + filepath.Dir(b.qcow2()) + `"`,
		"make build-qemu-ubuntu-2404", "uploaded as volume " + kvmVolume + " to kvm1, kvm2"} {
		if !strings.Contains(b.out.String(), w) {
			t.Errorf("dry run lacks %q:\n%s", w, b.out.String())
		}
	}
	if !strings.Contains(b.err.String(), "would: upload the new build as volume "+kvmVolume+" into pool images") {
		t.Errorf("dry run stderr:\n%s", b.err.String())
	}
	if _, err := os.Stat(b.PIDFile); err == nil {
		t.Error("the dry run ran packer")
	}
	for _, host := range []string{"kvm1", "kvm2"} {
		if files := b.poolFiles(t, host); len(files) != 0 {
			t.Errorf("the dry run put %v on %s", files, host)
		}
	}

	err := Build(context.Background(), b.opts(t, "fail", false))
	var be *BuildError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "--> qemu: Timeout waiting for SSH.") {
		t.Fatalf("failed build: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(b.qcow2())); err == nil {
		t.Error("the failed build left its output directory")
	}
	for _, host := range []string{"kvm1", "kvm2"} {
		if files := b.poolFiles(t, host); len(files) != 0 {
			t.Errorf("a failed build put %v on %s", files, host)
		}
	}
}

// TestQEMULeftoverOutputIsRebuilt: packer-plugin-qemu refuses an existing
// output_directory (the stand-in as the plugin does), so the folder a
// killed build left without its recorded sha256 is removed, and the
// build runs.
func TestQEMULeftoverOutputIsRebuilt(t *testing.T) {
	b := newKVMBed(t, nil)
	outDir := filepath.Dir(b.qcow2())
	must(t, os.MkdirAll(outDir, 0o755))
	must(t, os.WriteFile(b.qcow2(), []byte("QFI\xfbhalf a disk"), 0o644))

	// Packer itself, on that folder.
	tpl := filepath.Join(b.Builder, "images", "capi", "packer", "qemu", "packer.json.tmpl")
	vars := filepath.Join(t.TempDir(), "vars.json")
	must(t, os.WriteFile(vars, []byte(`{"output_directory":"`+outDir+`","vm_name":"`+kvmVolume+`"}`), 0o600))
	cmd := exec.Command(filepath.Join(b.Bin, "packer"), "build", "-color=false", "-var-file="+vars, tpl)
	cmd.Env = []string{"PATH=" + b.Path()}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "Failed to prepare build: \"qemu\"") ||
		!strings.Contains(string(out), "Output directory '"+outDir+"' already exists. It must not exist.") {
		t.Fatalf("packer on an existing output_directory: %v\n%s", err, out)
	}

	b.build(t, b.opts(t, "ok", false))
	if !strings.Contains(b.err.String(), "remove "+outDir+", the unfinished output of an earlier build, and run make build-qemu-ubuntu-2404") {
		t.Errorf("the run does not say it removes the leftover:\n%s", b.err.String())
	}
	img, err := os.ReadFile(b.qcow2())
	must(t, err)
	if len(img) < 4<<20 || !bytes.Equal(b.volume(t, "kvm1"), img) {
		t.Errorf("the leftover was not rebuilt and uploaded (%d bytes)", len(img))
	}
}

// TestQEMUBuildWithoutPacker: a QEMU build names the make target that
// installs packer for QEMU builds, not the Proxmox one.
func TestQEMUBuildWithoutPacker(t *testing.T) {
	err := qemuBuildPrereqs(context.Background(), t.TempDir(), "v1.9.5")
	if err == nil || !strings.Contains(err.Error(), "packer not found on PATH") || !strings.Contains(err.Error(), "make deps-qemu") || strings.Contains(err.Error(), "deps-proxmox") {
		t.Errorf("QEMU build without packer: %v", err)
	}
}

// TestImageListLibvirt: image list shows the node image volumes 'image
// build' uploaded to libvirt hosts, beside Proxmox templates.
func TestImageListLibvirt(t *testing.T) {
	d := libvirttest.StartStorage(t, libvirttest.StorageOptions{})
	pool := filepath.Join(d.Dir, "pool")
	drv, err := libvirt.New(t.Context(), libvirt.Options{Name: "kvm1", URI: d.URI(), Pool: "images", PoolPath: pool, Bridge: "br0"})
	must(t, err)
	must(t, drv.PrepareHost(t.Context()))
	file := filepath.Join(t.TempDir(), "disk.qcow2")
	// A real qcow2, as image build's packer leaves one.
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", file, "64M").CombinedOutput(); err != nil {
		t.Skipf("qemu-img: %v %s", err, out)
	}
	data, err := os.ReadFile(file)
	must(t, err)
	sum := sha256.Sum256(data)
	must(t, drv.PutVolume(t.Context(), libvirt.LocalImage{Path: file, Volume: kvmVolume, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}, nil))
	must(t, drv.Close())
	doc := map[string]any{
		"apiVersion": "labctl.dev/v1alpha1", "kind": "Lab", "metadata": map[string]any{"name": "kvm"},
		"hypervisors": []any{map[string]any{"name": "kvm1", "libvirt": map[string]any{"uri": d.URI(), "storagePool": "images", "bridge": "br0"}}},
		"network":     map[string]any{"cidr": "10.213.0.0/24", "gateway": "10.213.0.1", "dns": []any{"10.213.0.1"}},
		"management":  map[string]any{"hypervisor": "kvm1", "ip": "10.213.0.10", "sshPublicKeys": []any{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"}},
		"images":      []any{map[string]any{"name": "ubuntu-2404-kube", "hypervisor": "kvm1"}},
	}
	lab, _, err := config.Load(t.Context(), config.Request{Path: writeLab(t, filepath.Join(t.TempDir(), "lab.yaml"), doc), Explicit: true})
	must(t, err)
	io, _, out, _ := ui.Test()
	lo := ListOptions{IO: io, Lab: lab, Output: "json",
		Driver: func(ctx context.Context, name string) (hypervisor.Driver, error) { return drivers.Open(ctx, lab, name) }}
	must(t, List(t.Context(), lo))
	var rows []Template
	must(t, json.Unmarshal(out.Bytes(), &rows))
	if len(rows) != 1 || rows[0].Hypervisor != "kvm1" || rows[0].Name != kvmVolume || rows[0].Image != "ubuntu-2404-kube" || rows[0].Kubernetes != "v1.35.4" {
		t.Errorf("image list -o json on a libvirt host: %s", out.String())
	}
}
