package mgmt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/drivers"
	"github.com/labctl/labctl/internal/hypervisor/proxmox"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/ui"
)

// mgmt up on Proxmox: the real driver against the strict fake PVE (every
// request checked against the real PVE API schema). Its VMs have no guest
// agent, as the Ubuntu 24.04 cloud image has none: the agent endpoints
// answer 500 "QEMU guest agent is not running". The VM's sshd (sshtest, on
// loopback) serves the host key labctl put in the seed ISO the fake PVE
// received, and hands out the kubeconfig of the real test bed API server.
// The lab is the owner's, moved to loopback so nothing leaves this machine.

var pveImage = bytes.Repeat([]byte("noble-qcow2 "), 4096)

const pveImageURL = "https://cloud-images.example/noble/current/noble-server-cloudimg-amd64.img"

func proxmoxLab(t *testing.T, srv *pvetest.Server) *config.Lab {
	t.Helper()
	lab, err := config.Parse("lab.yaml", proxmoxLabYAML(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	return lab
}

// proxmoxLabYAML is the owner's lab.yaml on loopback, aimed at srv.
func proxmoxLabYAML(t *testing.T, srv *pvetest.Server) []byte {
	t.Helper()
	return testbed.OwnerLab(t, srv.URL, srv.Secret, func(doc, pve map[string]any) {
		// The fake serves a certificate of the test CA (pveTLS); CAPMOX can
		// verify only against a CA, never pin a fingerprint.
		caFile := filepath.Join(t.TempDir(), "pve-root-ca.pem")
		if err := os.WriteFile(caFile, pveCA(t).PEM, 0o600); err != nil {
			t.Fatal(err)
		}
		pve["tls"] = map[string]any{"caFile": caFile}
		doc["network"] = map[string]any{"cidr": "127.0.0.0/24", "gateway": "127.0.0.254", "vlan": 4, "dns": []string{"127.0.0.254"}}
		m := doc["management"].(map[string]any)
		m["ip"] = "127.0.0.1"
		m["sshPublicKeyFile"] = userKeyOf(t).pubFile
		sum := sha256.Sum256(pveImage)
		m["image"] = map[string]any{"url": pveImageURL, "checksum": "sha256:" + hex.EncodeToString(sum[:])}
		delete(doc, "images")
		delete(doc, "clusters")
	})
}

type pveBed struct {
	srv   *pvetest.Server
	lab   *config.Lab
	drv   *proxmox.Driver
	kc    []byte
	log   bytes.Buffer
	guest *sshtest.Guest
}

// pveCA is the test CA of the fake PVEs here, one per test binary.
var pveCA = func() func(t *testing.T) *pki.CA {
	once := sync.OnceValues(func() (*pki.CA, error) { return pki.NewCA("labctl mgmt test PVE CA") })
	return func(t *testing.T) *pki.CA {
		t.Helper()
		ca, err := once()
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
}()

// pveTLS has the fake PVE on 127.0.0.2 serve a certificate of pveCA.
func pveTLS(t *testing.T) pvetest.Option {
	t.Helper()
	pair, err := pveCA(t).Serving(nil, []net.IP{net.ParseIP("127.0.0.2")})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	return pvetest.WithCertificate(cert)
}

// options are the driver options for h, with short retries and polls,
// logging to b.log.
func (b *pveBed) options(t *testing.T, h config.Hypervisor) proxmox.Options {
	t.Helper()
	o, err := drivers.ProxmoxOptions(&h)
	if err != nil {
		t.Fatal(err)
	}
	o.Warn, o.Log = &b.log, &b.log
	o.Timeout, o.Backoff, o.MaxBackoff = 2*time.Second, 5*time.Millisecond, 50*time.Millisecond
	return o
}

func newPVEBed(t *testing.T, kc []byte) *pveBed {
	t.Helper()
	b := &pveBed{srv: pvetest.New(t, pvetest.WithAddr("127.0.0.2:0"), pveTLS(t),
		pvetest.WithTaskDelay(5*time.Millisecond), pvetest.WithoutGuestAgent()), kc: kc}
	b.srv.ServeURL(pveImageURL, pveImage)
	b.lab = proxmoxLab(t, b.srv)
	b.guest = sshtest.Start(t, "ubuntu", userKey(t))
	b.guest.HostKeyFrom(b.seedHostKey(t))
	b.guest.ServeFiles(func(p string) ([]byte, bool) { return kc, p == "/etc/rancher/k3s/k3s.yaml" })
	o := b.options(t, b.lab.Hypervisors[0])
	o.Verbose = 9
	d, err := proxmox.New(o)
	if err != nil {
		t.Fatal(err)
	}
	b.drv = d
	return b
}

func (b *pveBed) up(t *testing.T, ctx context.Context, inst Installer) (string, error) {
	t.Helper()
	io, _, out, _ := ui.Test()
	io.Err = out
	u, err := NewUp(b.lab, b.drv, UpOptions{IO: io, Installer: inst, Verbose: 9})
	if err != nil {
		t.Fatal(err)
	}
	u.apiPort = apiPortOf(t, b.kc)
	u.sshPort = b.guest.Addr.Port()
	err = (&step.Runner{IO: io, Verbose: 9}).Run(ctx, u.Steps())
	return out.String(), err
}

// seedHostKey is the VM's sshd coming up: once the lab's VM runs, the host
// key is the one in the user-data of the seed ISO (ide3) that PVE holds,
// as cloud-init's NoCloud source and cc_ssh read it in the guest.
func (b *pveBed) seedHostKey(t *testing.T) func() ssh.Signer {
	return func() ssh.Signer {
		for _, v := range b.srv.VMs() {
			if !v.Running || v.Name() != "labctl-mgmt" {
				continue
			}
			seed, _, _ := strings.Cut(v.Config["ide3"], ",")
			iso, ok := b.srv.Volume(v.Node, "local", seed)
			if !ok {
				t.Errorf("VM %d: seed ISO %q not on storage local", v.ID, seed)
				return nil
			}
			ud, err := sshtest.UserDataFromSeedISO(iso)
			if err == nil {
				var hk ssh.Signer
				if hk, err = sshtest.HostKeyFromUserData(ud); err == nil {
					return hk
				}
			}
			t.Errorf("VM %d: %v", v.ID, err)
		}
		return nil
	}
}

// labVMs counts the VMs of lab home; every VM must be labctl's or foreign.
func (b *pveBed) labVMs(t *testing.T) []pvetest.VM {
	t.Helper()
	var out []pvetest.VM
	for _, v := range b.srv.VMs() {
		if strings.Join(v.Tags(), ";") == "labctl;labctl-lab-home" {
			out = append(out, v)
		} else if v.ID >= 200 {
			t.Errorf("orphan VM %d %q", v.ID, v.Name())
		}
	}
	return out
}

func TestUpOnProxmoxEndToEnd(t *testing.T) {
	env := testbed.Start(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	b := newPVEBed(t, k3sStyle(t, env.Kubeconfig))
	inst := &recordingInstaller{}
	out, err := b.up(t, t.Context(), inst)
	if err != nil {
		t.Fatalf("mgmt up: %v\n%s", err, out)
	}
	reqs, polls := b.srv.Requests(), 0
	for _, r := range reqs {
		if strings.Contains(r.Path, "/agent/") {
			t.Errorf("mgmt up asked the guest agent: %s %s", r.Method, r.Path)
		}
		if r.Path == "/nodes/{node}/tasks/{upid}/status" {
			polls++
		}
	}
	w := b.srv.Writes()
	t.Logf("one mgmt up on Proxmox: %d PVE requests: %d writes, %d reads, %d polls of tasks; %d SSH logins", len(reqs), w, len(reqs)-w-polls, polls, b.guest.Logins())
	if w != 5 {
		t.Errorf("%d writes, want 5: download-url, upload, create, resize, start", w)
	}

	vms := b.labVMs(t)
	if len(vms) != 1 {
		t.Fatalf("%d management VMs", len(vms))
	}
	vm := vms[0]
	cfg := vm.Config
	mac := strings.ToUpper(hypervisor.StableMAC("home", "labctl-mgmt"))
	for k, want := range map[string]string{
		"name": "labctl-mgmt", "cores": "4", "memory": "8192", "agent": "enabled=1",
		"scsi0": "local-lvm:vm-201-disk-0,discard=on,iothread=1,size=40G", "ide2": "local-lvm:vm-201-cloudinit,media=cdrom",
		"net0": "virtio=" + mac + ",bridge=vmbr0,tag=4", "ipconfig0": "ip=127.0.0.1/24,gw=127.0.0.254", "ciuser": "ubuntu",
	} {
		if cfg[k] != want {
			t.Errorf("%s = %q, want %q", k, cfg[k], want)
		}
	}
	if vm.ID != 201 || !vm.Running {
		t.Errorf("VM %d running=%v", vm.ID, vm.Running)
	}
	seed, _, _ := strings.Cut(cfg["ide3"], ",")
	iso, ok := b.srv.Volume("pv1-1", "local", seed)
	if !ok || !bytes.Contains(iso, []byte("v1.35.4+k3s1")) || !bytes.Contains(iso, []byte("labctl-stack.yaml")) {
		t.Errorf("seed ISO %q: k3s pin or HelmChart manifests missing", seed)
	}
	ud, err := sshtest.UserDataFromSeedISO(iso)
	if err != nil {
		t.Fatal(err)
	}
	checkNoAgentHostKey(t, out+b.log.String(), ud, "home")
	path, _ := kube.MgmtKubeconfigPath("home")
	c, err := kube.Connect(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.ServerVersion(t.Context()); err != nil || v.GitVersion != "v1.35.4" {
		t.Fatalf("stored kubeconfig: %v %v", v, err)
	}
	if len(inst.kubeconfigs) != 1 {
		t.Errorf("mgmt install ran %d times", len(inst.kubeconfigs))
	}

	b.srv.ResetRequests()
	if out, err = b.up(t, t.Context(), inst); err != nil {
		t.Fatalf("second mgmt up: %v\n%s", err, out)
	}
	if want := "✓ size of VM labctl-mgmt (4 CPUs, 8.0 GiB memory)"; !strings.Contains(out, want) {
		t.Errorf("second mgmt up lacks %q:\n%s", want, out)
	}
	if w := b.srv.Writes(); w != 0 {
		t.Errorf("second mgmt up made %d PVE writes: %+v", w, b.srv.Requests())
	}
	// lab.yaml asks for more than the VM has: mgmt up says how to resize
	// it, and changes nothing (a restart is the user's call).
	b.lab.Management.Size.CPUs, b.lab.Management.Size.Memory = 8, "16Gi"
	b.srv.ResetRequests()
	out, err = b.up(t, t.Context(), inst)
	if err != nil {
		t.Fatalf("mgmt up after lab.yaml grew the VM: %v\n%s", err, out)
	}
	for _, want := range []string{
		"! size of VM labctl-mgmt (VM labctl-mgmt has 4 CPUs where management.size.cpus asks 8, and 8.0 GiB memory where management.size.memory asks 16.0 GiB)",
		"fix: on node pv1-1: qm set 201 --cores 8 --memory 16384",
		"fix: qm reboot 201 (the management cluster is down while the VM restarts",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("mgmt up lacks %q:\n%s", want, out)
		}
	}
	if w := b.srv.Writes(); w != 0 {
		t.Errorf("mgmt up with a size drift made %d PVE writes: %+v", w, b.srv.Requests())
	}
	if strings.Contains(out+b.log.String(), b.srv.Secret) {
		t.Error("the token secret was printed")
	}
}

// TestUpOnProxmoxInterruptedConverges cancels mgmt up at PVE requests
// of a whole run, one by one, then re-runs: one VM, and the run finishes.
func TestUpOnProxmoxInterruptedConverges(t *testing.T) {
	env := testbed.Start(t)
	kc := k3sStyle(t, env.Kubeconfig)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	probe := newPVEBed(t, kc)
	if out, err := probe.up(t, t.Context(), &recordingInstaller{}); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	total := len(probe.srv.Requests())
	for cut := 1; cut < total; cut++ {
		t.Run(fmt.Sprintf("cancel-at-request-%d", cut), func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			b := newPVEBed(t, kc)
			ctx, cancel := context.WithCancel(t.Context())
			n := 0
			b.srv.OnRequest(func(pvetest.Request) {
				if n++; n == cut {
					cancel()
				}
			})
			_, err := b.up(t, ctx, &recordingInstaller{})
			b.srv.OnRequest(nil)
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run: %v", err)
			}
			if out, err := b.up(t, t.Context(), &recordingInstaller{}); err != nil {
				t.Fatalf("re-run: %v\n%s", err, out)
			}
			if n := len(b.labVMs(t)); n != 1 {
				t.Errorf("%d VMs after the re-run", n)
			}
		})
	}
}

// TestUpOnProxmoxIntoRealInstall is the whole of 'labctl mgmt up' on
// Proxmox: the strict fake PVE makes the VM, its guest agent hands out the
// test bed's kubeconfig, and the real mgmt install puts the stack onto the
// real API server (charts from the loopback stand-in repo, stand-in
// controllers for what a real cluster would run). A second run writes to
// neither PVE nor the cluster.
func TestUpOnProxmoxIntoRealInstall(t *testing.T) {
	repo := standin.ServeRepo(t)
	env := testbed.Start(t, testbed.WithCRDs("capi", "operator", "helm-controller"))
	standin.PlayHelmController(t, env.Config)
	standin.PlayDeployments(t, env.Config, 100*time.Millisecond)
	standin.PlayOperator(t, env.Config, 100*time.Millisecond)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	b := newPVEBed(t, k3sStyle(t, env.Kubeconfig))
	b.lab.Management.Stack.ChartRepos = config.ChartRepos{CertManager: repo.URL, ClusterAPIOperator: repo.URL}

	var kubeWrites atomic.Int64
	instIO, _, instOut, _ := ui.Test()
	instIO.Err = instOut
	inst := &StackInstaller{IO: instIO, Timeout: time.Minute, Verbose: 3,
		Connect: func(path string) (*kube.Client, error) {
			c, err := kube.Connect(path)
			if err == nil {
				c.WrapTransport(func(rt http.RoundTripper) http.RoundTripper {
					return countWrites{rt, &kubeWrites}
				})
			}
			return c, err
		}}
	out, err := b.up(t, t.Context(), inst)
	if err != nil {
		t.Fatalf("mgmt up: %v\n%s\n%s", err, out, instOut.String())
	}
	vm := b.labVMs(t)[0]
	seed, _, _ := strings.Cut(vm.Config["ide3"], ",")
	iso, _ := b.srv.Volume("pv1-1", "local", seed)
	if !bytes.Contains(iso, []byte("labctl-cert-manager.yaml")) || !bytes.Contains(iso, []byte("kind: HelmChart")) {
		t.Error("the seed ISO lacks the stack's HelmChart manifests")
	}
	path, _ := kube.MgmtKubeconfigPath("home")
	c, err := kube.Connect(path)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.Ctrl()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ kind, ns, name string }{
		{"CoreProvider", "capi-system", "cluster-api"},
		{"InfrastructureProvider", "capmox-system", "proxmox"},
	} {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Kind: p.kind + "List"})
		if err := cl.List(t.Context(), &list); err != nil || len(list.Items) == 0 {
			t.Errorf("%s: %v, %d found", p.kind, err, len(list.Items))
		}
	}
	t.Logf("first run: %d PVE requests (%d writes), %d cluster writes", len(b.srv.Requests()), b.srv.Writes(), kubeWrites.Load())

	b.srv.ResetRequests()
	kubeWrites.Store(0)
	if out, err := b.up(t, t.Context(), inst); err != nil {
		t.Fatalf("second mgmt up: %v\n%s", err, out)
	}
	if w, k := b.srv.Writes(), kubeWrites.Load(); w != 0 || k != 0 {
		t.Errorf("second mgmt up: %d PVE writes, %d cluster writes; want 0 and 0", w, k)
	}
	if all := out + instOut.String() + b.log.String(); strings.Contains(all, b.srv.Secret) ||
		strings.Contains(all, base64.StdEncoding.EncodeToString([]byte(b.srv.Secret))) {
		t.Error("the token secret was printed")
	}
}

type countWrites struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if kube.IsWrite(r) {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// TestUpOnProxmoxConnectsFirst: against a Proxmox URL that accepts TCP and
// never answers, mgmt up fails in its first step, named for the Proxmox
// API, within the connect timeout, saying what happened and what to check;
// no later step (the cloud image) starts.
func TestUpOnProxmoxConnectsFirst(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	b := newPVEBed(t, nil)
	hung := testbed.StartSilent(t)
	h := b.lab.Hypervisors[0]
	p := *h.Proxmox
	p.URL = "https://" + hung.Addr
	h.Proxmox = &p
	o := b.options(t, h)
	o.ConnectTimeout = 500 * time.Millisecond
	d, err := proxmox.New(o)
	if err != nil {
		t.Fatal(err)
	}
	b.drv = d
	io, _, out, _ := ui.Test()
	io.Err = out
	u, err := NewUp(b.lab, b.drv, UpOptions{IO: io, Installer: &recordingInstaller{}})
	if err != nil {
		t.Fatal(err)
	}
	err = (&step.Runner{IO: io}).Run(t.Context(), u.Steps())
	want := "connect to Proxmox API https://" + hung.Addr
	if err == nil || !strings.HasPrefix(err.Error(), want+": Proxmox API") || !strings.Contains(err.Error(), "did not answer within 500ms") ||
		!strings.Contains(err.Error(), "check that the URL names the PVE API") {
		t.Fatalf("mgmt up against a silent Proxmox API = %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "✗ "+want) || strings.Contains(out.String(), "cloud image") {
		t.Errorf("the connect step is not first, or a later step ran:\n%s", out.String())
	}
}

// CAPMOX cannot pin a fingerprint, so mgmt install refuses such a lab;
// mgmt up must refuse it before it makes the VM, not after, in a real run
// and in a dry run alike.
func TestUpOnProxmoxRefusesAFingerprintLabBeforeTheVM(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	b := newPVEBed(t, nil)
	p := *b.lab.Hypervisors[0].Proxmox
	p.TLS = config.TLS{Fingerprint: strings.Repeat("AB:", 31) + "AB"}
	b.lab.Hypervisors[0].Proxmox = &p
	for _, dry := range []bool{false, true} {
		b.srv.ResetRequests()
		io, _, out, _ := ui.Test()
		io.Err = out
		err := Up(t.Context(), UpOptions{IO: io, Lab: b.lab, Source: config.Source{Name: "lab.yaml"}, DryRun: dry, AddressTimeout: 2 * time.Second, APITimeout: 2 * time.Second,
			Driver: func(context.Context, string) (hypervisor.Driver, error) { return b.drv, nil }})
		if err == nil || !strings.Contains(err.Error(), "hypervisors[pve].proxmox.tls.fingerprint") ||
			!strings.Contains(err.Error(), "set hypervisors[pve].proxmox.tls.caFile") || !strings.Contains(err.Error(), "nothing was made") {
			t.Fatalf("dry run %v: mgmt up on a fingerprint-only lab = %v\n%s", dry, err, out.String())
		}
		if n := b.srv.Writes(); n != 0 {
			t.Errorf("dry run %v: %d writes reached the Proxmox API before the refusal: %v", dry, n, b.srv.Requests())
		}
		if vms := b.labVMs(t); len(vms) != 0 {
			t.Errorf("dry run %v: VMs made: %v", dry, vms)
		}
	}
}

// TestUpOnProxmoxDryRunOffline: with the image's SHA256SUMS out of reach
// (offline), the dry run still prints the plan, and says what it could
// not check and why, rather than failing on the download it would make.
func TestUpOnProxmoxDryRunOffline(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	b := newPVEBed(t, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sums := "http://" + l.Addr().String() + "/SHA256SUMS"
	l.Close()
	b.lab.Management.Image.Checksum, b.lab.Management.Image.ChecksumURL = "", sums
	io, _, out, _ := ui.Test()
	io.Err = out
	u, err := NewUp(b.lab, b.drv, UpOptions{IO: io, DryRun: true, Installer: &recordingInstaller{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&step.Runner{IO: io, DryRun: true}).Run(t.Context(), u.Steps()); err != nil {
		t.Fatalf("offline dry run: %v\n%s", err, out)
	}
	for _, want := range []string{
		"would: download " + pveImageURL + ", check it against the sha256 listed in " + sums + ", and put it on pve (not checked: whether pve holds it already, since fetching " + sums + ": ",
		"connection refused; management.image.checksum set to sha256:<hex> needs no list)",
		"would: create VM labctl-mgmt on pve",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the offline dry run lacks %q:\n%s", want, out)
		}
	}
	if w := b.srv.Writes(); w != 0 {
		t.Errorf("the dry run made %d PVE writes", w)
	}
}

// TestDryRunsPlanPastAnUnreachableProxmox: against a Proxmox API that
// refuses the connection, mgmt up and mgmt down --dry-run still print
// their plans and exit 0: the connect step says what it could not check,
// why, and the fix, and every line that would have asked the API says it
// was not checked. The real runs stop at the connect step as before.
func TestDryRunsPlanPastAnUnreachableProxmox(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + l.Addr().String()
	l.Close()
	raw := testbed.OwnerLab(t, url, "token-secret-of-a-closed-port", func(doc, pve map[string]any) {
		pve["tls"] = map[string]any{"fingerprint": strings.Repeat("AB:", 31) + "AB"}
		doc["management"].(map[string]any)["sshPublicKeyFile"] = userKeyOf(t).pubFile
		delete(doc, "clusters")
	})
	lab, err := config.Parse("lab.yaml", raw)
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "the Proxmox API at " + url + " is unreachable"
	connect := "! connect to Proxmox API " + url + " (not checked: the Proxmox API at " + url + " (hypervisors[pve].proxmox.url) is unreachable: the connection was refused)"
	fix := "fix: check the port (PVE serves its API on 8006) and that pveproxy runs on the node"

	up := func(dry bool) (string, error) {
		io, out := answering("")
		err := Up(t.Context(), UpOptions{IO: io, Lab: lab, Source: config.Source{Name: "lab.yaml"}, DryRun: dry, Driver: opener(lab), Installer: &recordingInstaller{}})
		return out.String(), err
	}
	out, err := up(true)
	if err != nil {
		t.Fatalf("mgmt up --dry-run: %v\n%s", err, out)
	}
	for _, want := range []string{connect, fix,
		"would: download " + lab.Management.Image.URL + ", check it against the sha256 listed in " + lab.Management.Image.ChecksumURL + ", and put it on pve (not checked: whether pve holds it already: " + unreachable + ")",
		"would: create VM labctl-mgmt on pve: 4 CPUs, 8Gi memory, 40Gi disk, address 192.168.4.21/24, k3s " + lab.Management.K3sVersion + " by cloud-init (not checked: whether VM labctl-mgmt exists already: " + unreachable + ")",
		"! size of VM labctl-mgmt (not checked: the size of VM labctl-mgmt, if it exists: " + unreachable + ")",
		"would: start VM labctl-mgmt (not checked: whether it runs already: " + unreachable + ")",
		"would: install the management stack with mgmt install",
		"dry run: nothing was changed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("mgmt up --dry-run lacks %q:\n%s", want, out)
		}
	}

	out, err = down(t, lab, "", true, false)
	if err != nil {
		t.Fatalf("mgmt down --dry-run: %v\n%s", err, out)
	}
	for _, want := range []string{connect, fix,
		"workload clusters: none can exist (no kubeconfig at ",
		"VMs of lab home on pve:\n  each VM tagged labctl-lab-home, the management VM labctl-mgmt among them (not checked: which of them exist: " + unreachable + ")",
		"dry run: nothing was deleted",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("mgmt down --dry-run lacks %q:\n%s", want, out)
		}
	}

	refused := "connect to Proxmox API " + url + ": Proxmox API " + url + " (hypervisors[pve].proxmox.url): the connection was refused; check the port"
	for name, run := range map[string]func() (string, error){
		"mgmt up":         func() (string, error) { return up(false) },
		"mgmt down --yes": func() (string, error) { return down(t, lab, "", false, true) },
	} {
		out, err := run()
		if err == nil || !strings.HasPrefix(err.Error(), refused) || strings.Contains(out, "not checked") {
			t.Errorf("%s against a closed port = %v, want it to stop with %q\n%s", name, err, refused, out)
		}
	}
}
