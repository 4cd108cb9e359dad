package mgmt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/cloudinit"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/vmssh"
)

// memHypervisor is an in-memory hypervisor.Driver for the use case's
// tests: it records every call, keeps VMs and images like a host would,
// and its VM's sshd (sshtest, on loopback, with the host key from the
// user-data labctl hands CreateVM) serves the kubeconfig of a real test
// bed API server, rewritten to look like k3s's (server
// https://127.0.0.1:<port>). It has no guest agent: ReadFile fails as a
// VM without one does.
type memHypervisor struct {
	mu         sync.Mutex
	calls      []string
	images     map[string]hypervisor.Image
	vms        map[string]*hypervisor.VM
	specs      map[string]hypervisor.VMSpec
	kubeconfig []byte
	// notYet answers ErrNotFound for the kubeconfig this many times, as
	// k3s does while it starts.
	notYet int
	// cancelIn cancels when the named method is called.
	cancelIn map[string]context.CancelFunc
	// guest is the VM's sshd; user is the lab's key.
	guest *sshtest.Guest
}

func newMem(t *testing.T, kubeconfig []byte) *memHypervisor {
	m := &memHypervisor{images: map[string]hypervisor.Image{}, vms: map[string]*hypervisor.VM{}, specs: map[string]hypervisor.VMSpec{}, kubeconfig: kubeconfig, cancelIn: map[string]context.CancelFunc{}}
	m.guest = sshtest.Start(t, "ubuntu", userKey(t))
	m.guest.ServeFiles(func(path string) ([]byte, bool) {
		if path != cloudinit.K3sKubeconfigPath || m.kubeconfig == nil {
			return nil, false
		}
		if m.notYet > 0 {
			m.notYet--
			return nil, false
		}
		return m.kubeconfig, true
	})
	return m
}

// testUserKey is the lab user's key pair, made once per test; the lab's
// management.sshPublicKeyFile names its .pub.
type testUserKey struct {
	pubFile string
	pub     ssh.PublicKey
}

var userKeys sync.Map // *testing.T -> testUserKey

func userKeyOf(t *testing.T) testUserKey {
	t.Helper()
	if k, ok := userKeys.Load(t); ok {
		return k.(testUserKey)
	}
	t.Setenv("SSH_AUTH_SOCK", "") // the key file, never the developer's agent
	f, pub := sshtest.UserKey(t)
	k := testUserKey{f, pub}
	userKeys.Store(t, k)
	t.Cleanup(func() { userKeys.Delete(t) })
	return k
}

func userKey(t *testing.T) ssh.PublicKey { return userKeyOf(t).pub }

func (m *memHypervisor) call(ctx context.Context, name string) error {
	m.mu.Lock()
	m.calls = append(m.calls, name)
	cancel := m.cancelIn[name]
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return ctx.Err()
}

func (m *memHypervisor) count(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.calls {
		if c == name {
			n++
		}
	}
	return n
}

func (m *memHypervisor) Name() string { return "mem" }

func (m *memHypervisor) FindImage(ctx context.Context, s hypervisor.ImageSpec) (hypervisor.Image, error) {
	if err := m.call(ctx, "FindImage"); err != nil {
		return hypervisor.Image{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if img, ok := m.images[s.FileName]; ok {
		return img, nil
	}
	return hypervisor.Image{}, hypervisor.ErrNotFound
}

func (m *memHypervisor) EnsureImage(ctx context.Context, s hypervisor.ImageSpec) (hypervisor.Image, error) {
	if err := m.call(ctx, "EnsureImage"); err != nil {
		return hypervisor.Image{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	img := hypervisor.Image{Volume: "/pool/" + s.FileName}
	m.images[s.FileName] = img
	return img, nil
}

func (m *memHypervisor) FindVM(ctx context.Context, lab, name string) (hypervisor.VM, error) {
	if err := m.call(ctx, "FindVM"); err != nil {
		return hypervisor.VM{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if vm, ok := m.vms[name]; ok && vm.Lab == lab {
		return *vm, nil
	}
	return hypervisor.VM{}, hypervisor.ErrNotFound
}

func (m *memHypervisor) CreateVM(ctx context.Context, s hypervisor.VMSpec) (hypervisor.VM, error) {
	if err := m.call(ctx, "CreateVM"); err != nil {
		return hypervisor.VM{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if vm, ok := m.vms[s.Name]; ok {
		return *vm, nil
	}
	hk, err := sshtest.HostKeyFromUserData(s.CloudInit.UserData)
	if err != nil {
		return hypervisor.VM{}, err
	}
	m.guest.SetHostKey(hk)
	vm := &hypervisor.VM{Name: s.Name, Lab: s.Lab, CPUs: s.CPUs, MemoryMiB: s.MemoryMiB}
	m.vms[s.Name] = vm
	m.specs[s.Name] = s
	return *vm, nil
}

func (m *memHypervisor) StartVM(ctx context.Context, vm hypervisor.VM) error {
	if err := m.call(ctx, "StartVM"); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.vms[vm.Name].Running = true
	return nil
}

func (m *memHypervisor) WaitAddress(ctx context.Context, vm hypervisor.VM) (netip.Addr, error) {
	if err := m.call(ctx, "WaitAddress"); err != nil {
		return netip.Addr{}, err
	}
	return netip.MustParseAddr("127.0.0.1"), nil
}

// ReadFile is the guest agent, which the VM (like Ubuntu's cloud image)
// does not have.
func (m *memHypervisor) ReadFile(ctx context.Context, vm hypervisor.VM, path string) ([]byte, error) {
	if err := m.call(ctx, "ReadFile"); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("reading %s in VM %s: QEMU guest agent is not running", path, vm.Name)
}

func (m *memHypervisor) DeleteVM(ctx context.Context, vm hypervisor.VM) error {
	return m.call(ctx, "DeleteVM")
}

func (m *memHypervisor) ListVMs(ctx context.Context, lab string) ([]hypervisor.VM, error) {
	return nil, m.call(ctx, "ListVMs")
}

func (m *memHypervisor) Capacity(ctx context.Context) ([]hypervisor.NodeCapacity, error) {
	return nil, m.call(ctx, "Capacity")
}

// recordingInstaller is the mgmt install hook: it checks the kubeconfig
// it is handed reaches the API, like the real installer's first step.
type recordingInstaller struct {
	kubeconfigs []string
}

func (r *recordingInstaller) K3sManifests(*config.Lab) ([]cloudinit.File, error) {
	return []cloudinit.File{{Path: "labctl-stack.yaml", Content: []byte("apiVersion: helm.cattle.io/v1\nkind: HelmChart\n")}}, nil
}

func (r *recordingInstaller) Check(*config.Lab, bool) error { return nil }

func (r *recordingInstaller) Install(_ context.Context, _ *config.Lab, kubeconfig string) error {
	r.kubeconfigs = append(r.kubeconfigs, kubeconfig)
	return nil
}

// k3sStyle turns the test bed's admin kubeconfig into what k3s writes:
// one cluster, user and context named "default", at 127.0.0.1.
func k3sStyle(t *testing.T, path string) []byte {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	cluster.LocationOfOrigin, user.LocationOfOrigin, ctx.LocationOfOrigin = "", "", ""
	cfg.Clusters = map[string]*clientcmdapi.Cluster{"default": cluster}
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{"default": user}
	ctx.Cluster, ctx.AuthInfo = "default", "default"
	cfg.Contexts = map[string]*clientcmdapi.Context{"default": ctx}
	cfg.CurrentContext = "default"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// localLab is the built-in local-kvm lab with an inline key.
func localLab(t *testing.T) *config.Lab {
	t.Helper()
	return labFrom(t, nil)
}

// loopbackLab is localLab on 127.0.0.0/24 with the management VM at
// 127.0.0.1, where memHypervisor's "VM" (the test bed API) answers: the
// tests send nothing beyond loopback.
func loopbackLab(t *testing.T) *config.Lab {
	t.Helper()
	return labFrom(t, func(doc map[string]any) {
		doc["network"] = map[string]any{"cidr": "127.0.0.0/24", "gateway": "127.0.0.254", "dns": []string{"127.0.0.254"}}
		doc["management"].(map[string]any)["ip"] = "127.0.0.1"
	})
}

func labFrom(t *testing.T, edit func(map[string]any)) *config.Lab {
	t.Helper()
	raw, err := embedded.FS.ReadFile("examples/local-kvm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	m := doc["management"].(map[string]any)
	m["sshPublicKeyFile"] = userKeyOf(t).pubFile
	if edit != nil {
		edit(doc)
	}
	raw, _ = yaml.Marshal(doc)
	lab, err := config.Parse("local-kvm.yaml", raw)
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

func upOnce(t *testing.T, ctx context.Context, lab *config.Lab, drv hypervisor.Driver, inst Installer, dry bool) (string, error) {
	t.Helper()
	io, _, errb, _ := ui.Test()
	io.Err = errb
	u, err := NewUp(lab, drv, UpOptions{IO: io, DryRun: dry, Installer: inst})
	if err != nil {
		t.Fatal(err)
	}
	mem := drv.(*memHypervisor)
	if kc := mem.kubeconfig; kc != nil {
		u.apiPort = apiPortOf(t, kc)
	}
	u.sshPort = mem.guest.Addr.Port()
	r := &step.Runner{IO: io, DryRun: dry}
	err = r.Run(ctx, u.Steps())
	return errb.String(), err
}

// apiPortOf is the port of the test bed's API server: mgmt up probes it
// where it would probe k3s's 6443.
func apiPortOf(t *testing.T, kubeconfig []byte) uint16 {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Clusters["default"].Server)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return uint16(p)
}

func TestUpEndToEndOnTestBedAPI(t *testing.T) {
	env := testbed.Start(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	lab := loopbackLab(t)
	mem := newMem(t, k3sStyle(t, env.Kubeconfig))
	mem.notYet = 2
	inst := &recordingInstaller{}

	dry, err := upOnce(t, t.Context(), lab, mem, inst, true)
	if err != nil {
		t.Fatalf("mgmt up --dry-run: %v\n%s", err, dry)
	}
	out, err := upOnce(t, t.Context(), lab, mem, inst, false)
	if err != nil {
		t.Fatalf("mgmt up: %v\n%s", err, out)
	}
	// The plan names exactly the steps the real run took, in order.
	if got, want := ui.Started(dry), ui.Started(out); !slices.Equal(got, want) || len(want) < 7 {
		t.Errorf("mgmt up --dry-run lists steps\n  %s\nbut mgmt up ran\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if mem.count("CreateVM") != 1 || mem.count("EnsureImage") != 1 || mem.count("StartVM") != 1 {
		t.Errorf("calls %v; want one image, one create, one start", mem.calls)
	}
	spec := mem.specs["labctl-mgmt"]
	if spec.CPUs != 2 || spec.MemoryMiB != 4096 || spec.DiskGiB != 20 || spec.Network.MAC != hypervisor.StableMAC("local", "labctl-mgmt") {
		t.Errorf("VM spec %+v", spec)
	}
	ud := string(spec.CloudInit.UserData)
	for _, want := range []string{"v1.35.4+k3s1", "traefik", "tls-san:\n", "127.0.0.1", "/var/lib/rancher/k3s/server/manifests/labctl-stack.yaml"} {
		if !strings.Contains(ud, want) {
			t.Errorf("user-data lacks %q:\n%s", want, ud)
		}
	}
	if !strings.Contains(string(spec.CloudInit.NetworkConfig), "127.0.0.1/24") {
		t.Errorf("network-config: %s", spec.CloudInit.NetworkConfig)
	}

	path := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "labctl", "local", "mgmt.kubeconfig")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600", st.Mode().Perm())
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "local-mgmt" || !strings.HasPrefix(cfg.Clusters["local-mgmt"].Server, "https://127.0.0.1:") {
		t.Errorf("stored kubeconfig: context %q, clusters %v", cfg.CurrentContext, cfg.Clusters)
	}
	if len(inst.kubeconfigs) != 1 || inst.kubeconfigs[0] != path {
		t.Errorf("mgmt install ran with %v, want once with %s", inst.kubeconfigs, path)
	}
	checkNoAgentHostKey(t, out, spec.CloudInit.UserData, "local")
	if n := mem.count("ReadFile") + mem.count("WaitAddress"); n != 0 {
		t.Errorf("mgmt up asked the guest agent %d times; the address is management.ip and the kubeconfig comes over SSH", n)
	}
	if mem.guest.Logins() == 0 {
		t.Error("the kubeconfig did not come over SSH")
	}
	if !strings.Contains(out, "waiting for k3s to write /etc/rancher/k3s/k3s.yaml") {
		t.Errorf("mgmt up does not say what it waits for:\n%s", out)
	}

	// A second run changes nothing on the hypervisor.
	before := len(mem.calls)
	if out, err := upOnce(t, t.Context(), lab, mem, inst, false); err != nil {
		t.Fatalf("second mgmt up: %v\n%s", err, out)
	}
	for _, c := range mem.calls[before:] {
		if c == "CreateVM" || c == "EnsureImage" || c == "StartVM" {
			t.Errorf("second run called %s", c)
		}
	}
}

// checkNoAgentHostKey checks the host key labctl gave the VM: in the
// user-data's ssh_keys, the same as the one stored 0600 in the lab's
// state folder, and its private half in no output.
func checkNoAgentHostKey(t *testing.T, out string, userData []byte, lab string) {
	t.Helper()
	hk, err := sshtest.HostKeyFromUserData(userData)
	if err != nil {
		t.Fatalf("the VM got no SSH host key: %v", err)
	}
	file := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "labctl", lab, MgmtHostKeyFile)
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", file, st.Mode().Perm())
	}
	stored, err := vmssh.LoadHostKey(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored.PublicKey().Marshal(), hk.PublicKey().Marshal()) {
		t.Error("the stored host key is not the one in the VM's cloud-init")
	}
	priv := stored.CloudInit().Private
	body := strings.Split(string(priv), "\n")[2] // a line of the key itself
	if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, body) {
		t.Errorf("the host's private key was printed:\n%s", out)
	}
}

// TestUpDHCPAddressFromTheHypervisor: without management.ip the address
// comes from the hypervisor (libvirt: the DHCP lease), and mgmt up says so.
func TestUpDHCPAddressFromTheHypervisor(t *testing.T) {
	env := testbed.Start(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	lab := labFrom(t, func(doc map[string]any) {
		doc["network"] = map[string]any{"cidr": "127.0.0.0/24", "gateway": "127.0.0.254", "dns": []string{"127.0.0.254"}}
		delete(doc["management"].(map[string]any), "ip")
	})
	mem := newMem(t, k3sStyle(t, env.Kubeconfig))
	out, err := upOnce(t, t.Context(), lab, mem, &recordingInstaller{}, false)
	if err != nil {
		t.Fatalf("mgmt up: %v\n%s", err, out)
	}
	if mem.count("WaitAddress") != 1 || mem.count("ReadFile") != 0 {
		t.Errorf("calls %v: want the address from the hypervisor once and no guest agent read", mem.calls)
	}
	if !strings.Contains(out, "127.0.0.1 (DHCP)") {
		t.Errorf("mgmt up does not say where the address came from:\n%s", out)
	}
}

// TestUpRefusesAnotherHostKey: a VM at the address that presents another
// host key than the one labctl gave it is refused, naming both.
func TestUpRefusesAnotherHostKey(t *testing.T) {
	env := testbed.Start(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	mem := newMem(t, k3sStyle(t, env.Kubeconfig))
	lab := loopbackLab(t)
	if out, err := upOnce(t, t.Context(), lab, mem, &recordingInstaller{}, false); err != nil {
		t.Fatalf("mgmt up: %v\n%s", err, out)
	}
	other, err := vmssh.GenerateHostKey()
	if err != nil {
		t.Fatal(err)
	}
	mem.guest.SetHostKey(other.Signer())
	out, err := upOnce(t, t.Context(), lab, mem, &recordingInstaller{}, false)
	if err == nil || !strings.Contains(err.Error(), "refusing 127.0.0.1:") || !strings.Contains(err.Error(), other.Fingerprint()) {
		t.Fatalf("mgmt up against another host key = %v\n%s", err, out)
	}
}

// TestUpInterruptedConverges cancels mgmt up inside each hypervisor
// call, then re-runs it: exactly one VM, and the run finishes.
func TestUpInterruptedConverges(t *testing.T) {
	env := testbed.Start(t)
	kc := k3sStyle(t, env.Kubeconfig)
	for _, at := range []string{"EnsureImage", "CreateVM", "StartVM"} {
		t.Run(at, func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			lab := loopbackLab(t)
			mem := newMem(t, kc)
			ctx, cancel := context.WithCancel(t.Context())
			mem.cancelIn[at] = cancel
			if _, err := upOnce(t, ctx, lab, mem, &recordingInstaller{}, false); !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted in %s: err = %v", at, err)
			}
			delete(mem.cancelIn, at)
			if out, err := upOnce(t, t.Context(), lab, mem, &recordingInstaller{}, false); err != nil {
				t.Fatalf("re-run after an interrupt in %s: %v\n%s", at, err, out)
			}
			if len(mem.vms) != 1 {
				t.Errorf("%d VMs after an interrupt in %s and a re-run", len(mem.vms), at)
			}
		})
	}
}

func TestUpDryRunChangesNothing(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	mem := newMem(t, nil)
	out, err := upOnce(t, t.Context(), localLab(t), mem, nil, true)
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, c := range mem.calls {
		if c != "FindVM" && c != "FindImage" {
			t.Errorf("dry run called %s", c)
		}
	}
	for _, want := range []string{"would: download https://cloud-images.ubuntu.com/", "would: create VM labctl-mgmt on mem: 2 CPUs, 4Gi memory, 20Gi disk, address 10.213.0.10/24, k3s v1.35.4+k3s1", "would: start VM labctl-mgmt", "mgmt install"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
}

// A management VM smaller or larger than management.size is not "up to
// date": mgmt up says what differs and how to apply it, and changes
// nothing (the new size applies only at a restart, which is the user's
// call). On a libvirt host the fix is virsh's.
func TestUpSaysHowToResize(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	lab := localLab(t)
	mem := newMem(t, nil)
	mem.vms["labctl-mgmt"] = &hypervisor.VM{Name: "labctl-mgmt", Lab: lab.Metadata.Name, CPUs: 1, MemoryMiB: 2048}
	out, err := upOnce(t, t.Context(), lab, mem, nil, true)
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, want := range []string{
		"! size of VM labctl-mgmt (VM labctl-mgmt has 1 CPUs where management.size.cpus asks 2, and 2.0 GiB memory where management.size.memory asks 4.0 GiB)",
		"fix: virsh -c qemu:///system edit labctl-mgmt: <vcpu>2</vcpu>, <memory unit='MiB'>4096</memory> and <currentMemory unit='MiB'>4096</currentMemory>",
		"fix: virsh -c qemu:///system shutdown labctl-mgmt, and once it is off, virsh -c qemu:///system start labctl-mgmt",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("mgmt up lacks %q:\n%s", want, out)
		}
	}
	mem.vms["labctl-mgmt"].CPUs, mem.vms["labctl-mgmt"].MemoryMiB = 2, 4096
	if out, err := upOnce(t, t.Context(), lab, mem, nil, true); err != nil || !strings.Contains(out, "✓ size of VM labctl-mgmt (2 CPUs, 4.0 GiB memory)") {
		t.Errorf("a VM of the asked size: %v\n%s", err, out)
	}
}

func TestNewUpNamesMissingKeyFile(t *testing.T) {
	lab := localLab(t)
	lab.Management.SSHPublicKeys = nil
	lab.Management.SSHPublicKeyFile = filepath.Join(t.TempDir(), "nope.pub")
	io, _, _, _ := ui.Test()
	_, err := NewUp(lab, newMem(t, nil), UpOptions{IO: io})
	if err == nil || !strings.Contains(err.Error(), "management.sshPublicKeyFile") || !strings.Contains(err.Error(), "ssh-keygen") {
		t.Fatalf("NewUp = %v; want an error naming the field and the fix", err)
	}
}

func TestRewriteKubeconfig(t *testing.T) {
	in := []byte(`apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: Y2E=
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
`)
	out, err := rewriteKubeconfig(in, netip.MustParseAddr("10.213.0.10"), "local")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Clusters["local-mgmt"]
	if c == nil || c.Server != "https://10.213.0.10:6443" || string(c.CertificateAuthorityData) != "ca" {
		t.Errorf("cluster %+v", c)
	}
	if cfg.Contexts["local-mgmt"].AuthInfo != "local-mgmt" || string(cfg.AuthInfos["local-mgmt"].ClientKeyData) != "key" {
		t.Errorf("context/user not renamed: %+v", cfg)
	}
	if _, err := rewriteKubeconfig([]byte("not yaml: ["), netip.MustParseAddr("10.0.0.1"), "x"); err == nil {
		t.Error("garbage accepted")
	}
}

// One reader of the public keys: 'mgmt up' used to put a private key
// named as sshPublicKeyFile on the VM as if it were public.
func TestNewUpRefusesPrivateKeyAsPublic(t *testing.T) {
	lab := localLab(t)
	lab.Management.SSHPublicKeys = nil
	lab.Management.SSHPublicKeyFile = filepath.Join(t.TempDir(), "id_ed25519.pub")
	if err := os.WriteFile(lab.Management.SSHPublicKeyFile, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	io, _, _, _ := ui.Test()
	_, err := NewUp(lab, newMem(t, nil), UpOptions{IO: io, DryRun: true})
	if err == nil || !strings.Contains(err.Error(), "management.sshPublicKeyFile") || !strings.Contains(err.Error(), "holds a private key") || strings.Contains(err.Error(), "b3Blbn") {
		t.Fatalf("NewUp = %v; want the private key refused, naming the field and not the key", err)
	}
}
