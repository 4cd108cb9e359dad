package box_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

// The test lab: examples/lab.yaml with its addresses moved onto loopback.
// PVE 192.168.0.8 becomes 127.77.0.8, the VM network 192.168.4.0/24
// becomes 127.77.0.0/24 (VIP 127.77.0.30, nodes 127.77.0.40-59). Only the
// fake PVE listens on one of them; nothing leaves the machine.
const (
	pveAddr    = "127.77.0.8"
	templateID = 9000
)

// testLab writes examples/lab.yaml onto loopback, with the fake PVE's URL
// and the test CA as its tls.caFile, then the edits (old, new text), and
// loads it as labctl would.
func testLab(t testing.TB, pveURL, caFile string, edits ...[2]string) *config.Lab {
	t.Helper()
	data, err := os.ReadFile("../../../../examples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	// The edits first, so that what they add is mapped onto loopback too.
	for _, r := range append(slices.Clip(edits), [][2]string{
		{"https://192.168.0.8:8006", pveURL},
		{"~/.config/labctl/pve-root-ca.pem", caFile},
		{"192.168.4.", "127.77.0."},
	}...) {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("examples/lab.yaml no longer holds %q; update this test's loopback mapping", r[0])
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	for i, line := range strings.Split(s, "\n") {
		if value, _, _ := strings.Cut(line, "#"); strings.Contains(value, "192.168.") {
			t.Fatalf("the test lab still names a LAN address on line %d: %s", i+1, line)
		}
	}
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	lab, _, err := config.Load(context.Background(), config.Request{Path: path, Explicit: true})
	if err != nil {
		t.Fatalf("loading the loopback lab: %v", err)
	}
	return lab
}

// pveLab starts the fake PVE on pveAddr with a certificate signer
// issued (and opts), and loads the test lab aimed at it with trusted's
// certificate as its tls.caFile (a file of mode 0600), the token secret
// exported.
func pveLab(t testing.TB, signer, trusted *pki.CA, opts ...pvetest.Option) (*pvetest.Server, *config.Lab) {
	t.Helper()
	return pveLabEdited(t, signer, trusted, nil, opts...)
}

// pveLabEdited is pveLab with edits to the test lab's text (testLab).
func pveLabEdited(t testing.TB, signer, trusted *pki.CA, edits [][2]string, opts ...pvetest.Option) (*pvetest.Server, *config.Lab) {
	t.Helper()
	pair, err := signer.Serving([]string{"localhost"}, []net.IP{net.ParseIP(pveAddr)})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	fake := pvetest.New(t, append([]pvetest.Option{pvetest.WithAddr(pveAddr + ":0"), pvetest.WithCertificate(cert)}, opts...)...)
	caFile := filepath.Join(t.TempDir(), "pve-root-ca.pem")
	if err := os.WriteFile(caFile, trusted.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PVE_TOKEN_SECRET", fake.Secret)
	return fake, testLab(t, fake.URL, caFile, edits...)
}

// capmoxProcess is what CAPMOX's process gets from labctl's rendered
// stack in a real cluster, with no setting of the test's own:
//   - env: cluster-api-operator substitutes the configSecret's
//     PROXMOX_URL, PROXMOX_TOKEN and PROXMOX_SECRET into CAPMOX's
//     components, whose Secret capmox-manager-credentials (config/default/
//     proxmox-credentials-secret.yaml, v0.9.0) the Deployment's env reads
//     (manager_credentials_patch.yaml);
//   - args and files: the operator makes CAPMOX's release Deployment
//     from the Provider CR (upstream.AsOperator: spec.deployment.containers
//     and spec.patches), and kubelet mounts the ConfigMaps labctl renders
//     where the manager container mounts them. The box has no mount
//     namespace, so each mountPath is a folder under dir, and a flag
//     naming a file under it is mapped there (as the runner maps them).
//
// Only the flags labctl's Provider CR sets are returned: the box gives
// the manager its own listeners and kubeconfig (box.capmoxArgs).
func capmoxProcess(t testing.TB, lab *config.Lab, dir string) (env, args []string, spec map[string]any) {
	t.Helper()
	cs, err := components.Build(lab, versions.MustGet(), components.Options{ReadSecret: (*config.Hypervisor).ReadTokenSecret})
	if err != nil {
		t.Fatal(err)
	}
	var cr *unstructured.Unstructured
	configMaps := map[string]map[string]string{}
	for _, c := range cs {
		if c.Provider == nil || c.Provider.Name != "proxmox" {
			continue
		}
		for _, o := range c.Objects {
			switch o.GetKind() {
			case c.Provider.GVK.Kind:
				cr = o
			case "ConfigMap":
				configMaps[o.GetName()], _, _ = unstructured.NestedStringMap(o.Object, "data")
			case "Secret":
				if o.GetName() != components.ProxmoxSecret {
					continue
				}
				data, _, _ := unstructured.NestedStringMap(o.Object, "data")
				for _, k := range []string{"PROXMOX_URL", "PROXMOX_TOKEN", "PROXMOX_SECRET"} {
					v, err := base64.StdEncoding.DecodeString(data[k])
					if err != nil || len(v) == 0 {
						t.Fatalf("configSecret %s: key %s is missing or not base64: %v", components.ProxmoxSecret, k, err)
					}
					env = append(env, k+"="+string(v))
				}
			}
		}
	}
	if cr == nil || env == nil {
		t.Fatalf("labctl renders no CAPMOX Provider CR or no configSecret %s", components.ProxmoxSecret)
	}

	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	spec, _, _ = unstructured.NestedMap(cr.Object, "spec")
	d, err := upstream.DeploymentAsOperator(t.Context(), root, "capmox", spec)
	if err != nil {
		t.Fatal(err)
	}
	vols := map[string]string{} // volume name -> ConfigMap
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			vols[v.Name] = v.ConfigMap.Name
		}
	}
	mounts := map[string]string{} // mountPath -> local folder
	var manager []string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "manager" {
			continue
		}
		manager = c.Args
		for _, m := range c.VolumeMounts {
			data, ok := configMaps[vols[m.Name]]
			if !ok {
				continue // not one of labctl's (the webhook certificate: the box's own)
			}
			local := filepath.Join(dir, filepath.FromSlash(m.MountPath))
			if err := os.MkdirAll(local, 0o700); err != nil {
				t.Fatal(err)
			}
			for k, v := range data {
				if err := os.WriteFile(filepath.Join(local, k), []byte(v), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			mounts[m.MountPath] = local
		}
	}
	ours := managerArgsOf(cr)
	for _, a := range manager {
		name, value, _ := strings.Cut(a, "=")
		if _, ok := ours[name]; !ok {
			continue
		}
		for mp, local := range mounts {
			if rest, ok := strings.CutPrefix(value, mp+"/"); ok {
				value = filepath.Join(local, filepath.FromSlash(rest))
			}
		}
		args = append(args, name+"="+value)
	}
	if len(args) != len(ours) {
		t.Fatalf("CAPMOX's Deployment args %v lack some of the Provider CR's %v", manager, ours)
	}
	return env, args, spec
}

// managerArgsOf are the args a Provider CR gives the manager container.
func managerArgsOf(cr *unstructured.Unstructured) map[string]string {
	cs, _, _ := unstructured.NestedSlice(cr.Object, "spec", "deployment", "containers")
	for _, c := range cs {
		if m, _ := c.(map[string]any); m["name"] == "manager" {
			args, _, _ := unstructured.NestedStringMap(m, "args")
			return args
		}
	}
	return nil
}

// capmoxBox is lab1 applied to the box with the real Cluster API,
// kubeadm, in-cluster IPAM and CAPMOX managers, against the strict fake
// PVE holding lab1's template and the management VM; vm is the
// control-plane VM CAPMOX made and started.
type capmoxBox struct {
	fake *pvetest.Server
	lab  *config.Lab
	r    *clusterapi.Rendered
	b    *box.Box
	kc   *kube.Client
	vm   pvetest.VM
	// strays are clones CAPMOX v0.9.0 left behind: under load it can
	// clone twice for one ProxmoxMachine (the second clone's reconcile
	// did not yet see the first's VMID), leaving a stopped, unconfigured
	// VM that labctl gc reports.
	strays []int
}

func startCAPMOXBox(t *testing.T) *capmoxBox {
	t.Helper()
	ca, err := pki.NewCA("labctl test PVE CA")
	if err != nil {
		t.Fatal(err)
	}
	// No guest boots here, so no guest agent ever answers.
	fake, lab := pveLab(t, ca, ca, pvetest.WithoutGuestAgent())

	r, err := clusterapi.Render(clusterapi.Input{Lab: lab, Cluster: "lab1", Credentials: ownerKeys{}, Pins: versions.MustGet()})
	if err != nil {
		t.Fatal(err)
	}

	// The template image-builder would have left on pv1-1, with the tags
	// labctl's templateSelector matches.
	img := lab.Images[0]
	fake.AddTemplate("pv1-1", templateID, img.Name, img.TemplateTags()...)
	// The management VM (vmid 201) and another VM already hold ids at the
	// start of the lab's vmidRange.
	fake.AddVM("pv1-1", lab.Management.VMID, lab.Management.Name, 8192, true, false)
	fake.AddVM("pv1-1", 200, "owner-vm", 1024, false, false)
	before := map[int]bool{}
	for _, v := range fake.VMs() {
		before[v.ID] = true
	}

	// Everything CAPMOX knows of the PVE, TLS verification and the CA
	// included, comes from what labctl rendered.
	env, args, spec := capmoxProcess(t, lab, t.TempDir())
	// The lab's tls.caFile asks for verification against its CA: CAPMOX
	// must be told both (its PROXMOX_INSECURE defaults to "true").
	if !slices.Contains(args, "--proxmox-insecure=false") || !slices.ContainsFunc(args, func(a string) bool {
		return strings.HasPrefix(a, "--proxmox-root-cert-file=")
	}) {
		t.Fatalf("labctl's stack leaves CAPMOX without verification against the lab's CA: flags %v", args)
	}
	b := box.Start(t,
		box.WithProviders("cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane", "ipam-in-cluster", "capmox"),
		box.WithEnv("capmox", env...), box.WithArgs("capmox", args...), box.WithOperatorSpec("capmox", spec))
	kc := kube.NewForConfig(b.Env.Config, b.Env.Kubeconfig)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if _, err := kc.Apply(ctx, r.Objects, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying lab1's objects: %v", err)
	}

	// Wait for the real CAPMOX to start a clone of the template.
	var vm pvetest.VM
	var strays []int
	deadline := time.Now().Add(3 * time.Minute)
	for {
		clones := newVMs(fake, before)
		if i := slices.IndexFunc(clones, func(v pvetest.VM) bool { return v.Running }); i >= 0 {
			vm = clones[i]
			for _, v := range clones {
				if v.ID != vm.ID {
					strays = append(strays, v.ID)
				}
			}
			break
		}
		for name, p := range b.Procs {
			if exited, err := p.Exited(); exited {
				t.Fatalf("%s exited: %v", name, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running clone of template %d in the fake PVE after 3 minutes; VMs: %+v\nrequests: %s", templateID, fake.VMs(), requestSummary(fake))
		}
		time.Sleep(time.Second)
	}
	if len(strays) > 0 {
		t.Logf("CAPMOX cloned the template more than once for one machine: VM %d runs, VMs %v are strays", vm.ID, strays)
	}
	return &capmoxBox{fake: fake, lab: lab, r: r, b: b, kc: kc, vm: vm, strays: strays}
}

// The real CAPMOX, run by the box beside the real Cluster API core,
// kubeadm bootstrap and control plane and in-cluster IPAM managers, makes
// the control-plane VM of lab1 in the strict fake PVE over verified TLS:
// it clones the template labctl's templateSelector matches, configures
// the ProxmoxMachineTemplate's cores, memory and net0, uploads the
// cloud-init ISO and starts the VM, with an address from the in-cluster
// IPAM pool.
func TestRealCAPMOXMakesTheControlPlaneVM(t *testing.T) {
	c := startCAPMOXBox(t)
	fake, lab, r, b, vm := c.fake, c.lab, c.r, c.b, c.vm
	want := machineSpec(t, controlPlaneTemplate(t, c.r))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	t.Logf("CAPMOX made VM %d %q on %s: %v", vm.ID, vm.Name(), vm.Node, vm.Config)

	// The lab's vmidRange is where labctl's VMs get their ids
	// (docs/config.md), the cluster's machines too.
	if r := lab.Hypervisors[0].Proxmox.VMIDRange; r == nil || vm.ID < r.Start || vm.ID > r.End {
		t.Errorf("CAPMOX gave the control-plane VM id %d, outside the lab's vmidRange %+v", vm.ID, r)
	}
	if got, w := vm.Config["cores"], fmt.Sprint(want.cores); got != w {
		t.Errorf("VM %d cores = %q, want the ProxmoxMachineTemplate's numCores %s", vm.ID, got, w)
	}
	if got, w := vm.Config["memory"], fmt.Sprint(want.memoryMiB); got != w {
		t.Errorf("VM %d memory = %q, want the ProxmoxMachineTemplate's memoryMiB %s", vm.ID, got, w)
	}
	net0 := vm.Config["net0"]
	for _, w := range []string{"bridge=" + want.bridge, fmt.Sprintf("tag=%d", want.vlan)} {
		if !strings.Contains(","+net0+",", ","+w+",") {
			t.Errorf("VM %d net0 = %q, want %s from the ProxmoxMachineTemplate", vm.ID, net0, w)
		}
	}

	// The cloud-init ISO: uploaded as iso content and mounted on the VM.
	iso := fmt.Sprintf("user-data-%d.iso", vm.ID)
	var uploaded bool
	for _, v := range fake.Volumes("pv1-1", "local") {
		if v == "local:iso/"+iso {
			uploaded = true
		}
	}
	if !uploaded {
		t.Errorf("no cloud-init ISO %s uploaded to pv1-1's local storage; its volumes: %v", iso, fake.Volumes("pv1-1", "local"))
	}
	if got := vm.Config["ide0"]; !strings.Contains(got, "iso/"+iso) {
		t.Errorf("VM %d ide0 = %q, want the cloud-init ISO %s mounted", vm.ID, got, iso)
	}
	if !hasRequest(fake, "POST", "/nodes/{node}/qemu/{vmid}/clone") || !hasRequest(fake, "POST", "/nodes/{node}/qemu/{vmid}/status/start") {
		t.Errorf("the fake saw no clone or no start request:\n%s", requestSummary(fake))
	}

	// The machine's address comes from the real in-cluster IPAM pool.
	addr := ipAddressOf(ctx, t, b, r.Namespace)
	lo, hi := rangeOf(t, lab.Clusters[0].NodeIPRange)
	if ip := net.ParseIP(addr); ip == nil || !between(ip, lo, hi) {
		t.Errorf("IPAddress %s is not in lab1's nodeIPRange %s", addr, lab.Clusters[0].NodeIPRange)
	}
	t.Logf("the control-plane machine's IPAddress: %s", addr)
}

type wantSpec struct {
	cores, memoryMiB int64
	bridge           string
	vlan             int64
}

func controlPlaneTemplate(t *testing.T, r *clusterapi.Rendered) *unstructured.Unstructured {
	t.Helper()
	kcp := r.Find("KubeadmControlPlane", r.ControlPlane)
	name, _, _ := unstructured.NestedString(kcp.Object, "spec", "machineTemplate", "spec", "infrastructureRef", "name")
	tmpl := r.Find("ProxmoxMachineTemplate", name)
	if tmpl == nil {
		t.Fatalf("KubeadmControlPlane %s names ProxmoxMachineTemplate %q, which lab1 does not render", kcp.GetName(), name)
	}
	return tmpl
}

func machineSpec(t *testing.T, tmpl *unstructured.Unstructured) wantSpec {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(tmpl.Object, "spec", "template", "spec")
	var w wantSpec
	w.cores, _, _ = unstructured.NestedInt64(spec, "numCores")
	w.memoryMiB, _, _ = unstructured.NestedInt64(spec, "memoryMiB")
	devs, _, _ := unstructured.NestedSlice(spec, "network", "networkDevices")
	for _, d := range devs {
		m := d.(map[string]any)
		if m["name"] == "net0" {
			w.bridge, _ = m["bridge"].(string)
			w.vlan, _, _ = unstructured.NestedInt64(m, "vlan")
		}
	}
	if w.cores == 0 || w.memoryMiB == 0 || w.bridge == "" || w.vlan == 0 {
		t.Fatalf("ProxmoxMachineTemplate %s lacks cores, memory, net0 bridge or VLAN: %v", tmpl.GetName(), spec)
	}
	return w
}

// newVMs are the VMs that were not there before: clones of the
// template.
func newVMs(fake *pvetest.Server, before map[int]bool) []pvetest.VM {
	var out []pvetest.VM
	for _, v := range fake.VMs() {
		if !before[v.ID] {
			out = append(out, v)
		}
	}
	return out
}

func hasRequest(fake *pvetest.Server, method, tmpl string) bool {
	for _, r := range fake.Requests() {
		if r.Method == method && r.Path == tmpl && r.Status == 200 {
			return true
		}
	}
	return false
}

func requestSummary(fake *pvetest.Server) string {
	var b strings.Builder
	for _, r := range fake.Requests() {
		fmt.Fprintf(&b, "%d %s %s\n", r.Status, r.Method, r.Raw)
	}
	return b.String()
}

// ipAddressOf waits for the IPAddress the in-cluster IPAM provider
// allocates for the control-plane machine's claim.
func ipAddressOf(ctx context.Context, t *testing.T, b *box.Box, ns string) string {
	t.Helper()
	cl, err := client.New(b.Env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1beta2", Kind: "IPAddressList"})
	deadline := time.Now().Add(time.Minute)
	for {
		if err := cl.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Fatalf("listing IPAddresses: %v", err)
		}
		for _, a := range list.Items {
			pool, _, _ := unstructured.NestedString(a.Object, "spec", "poolRef", "kind")
			addr, _, _ := unstructured.NestedString(a.Object, "spec", "address")
			if pool == "InClusterIPPool" && addr != "" {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no IPAddress from an InClusterIPPool in namespace %s after a minute: %v", ns, list.Items)
		}
		time.Sleep(time.Second)
	}
}

func rangeOf(t *testing.T, r string) (net.IP, net.IP) {
	t.Helper()
	lo, hi, ok := strings.Cut(strings.ReplaceAll(r, " ", ""), "-")
	if !ok {
		t.Fatalf("nodeIPRange %q is not a-b", r)
	}
	return net.ParseIP(lo).To4(), net.ParseIP(hi).To4()
}

func between(ip, lo, hi net.IP) bool {
	ip = ip.To4()
	return ip != nil && string(ip) >= string(lo) && string(ip) <= string(hi)
}

// The real CAPMOX, given only what labctl rendered for a lab whose
// tls.caFile is one CA, refuses a PVE whose certificate another CA
// signed: its client asks /version before its manager starts
// (cmd/main.go setupProxmoxClient, v0.9.0), the handshake fails, and it
// exits. No request reaches the fake, so no VM is cloned. (Before labctl
// rendered the TLS settings, CAPMOX's default PROXMOX_INSECURE "true"
// took any certificate.)
func TestRealCAPMOXRefusesAnotherCA(t *testing.T) {
	box.Require(t, "capmox")
	labCA, err := pki.NewCA("labctl test PVE CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	fake, lab := pveLab(t, other, labCA, pvetest.WithoutGuestAgent())
	dir := t.TempDir()
	img := lab.Images[0]
	fake.AddTemplate("pv1-1", templateID, img.Name, img.TemplateTags()...)
	env, args, _ := capmoxProcess(t, lab, dir)

	// CAPMOX makes its manager (which only reads the kubeconfig) before
	// its Proxmox client, so no API server is needed to reach the
	// refusal: the kubeconfig names a loopback port nothing serves.
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(testbed.Assets(t), "capmox"), append([]string{
		"--kubeconfig=" + kubeconfig, "--leader-elect=false",
		"--health-probe-bind-address=127.0.0.1:0", "--diagnostics-address=127.0.0.1:0", "--insecure-diagnostics",
	}, args...)...)
	cmd.Env = append(append(os.Environ(), "TMPDIR="+dir), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("CAPMOX still ran after 2 minutes against a PVE of another CA; requests: %s\n%s", requestSummary(fake), out)
	}
	if err == nil {
		t.Fatalf("CAPMOX exited 0 against a PVE of another CA:\n%s", out)
	}
	for _, w := range []string{"unable to setup proxmox API client", "x509: certificate signed by unknown authority"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("CAPMOX's output lacks %q:\n%s", w, out)
		}
	}
	if reqs := fake.Requests(); len(reqs) != 0 {
		t.Errorf("the fake PVE of another CA answered CAPMOX:\n%s", requestSummary(fake))
	}
	if len(newVMs(fake, map[int]bool{templateID: true})) > 0 {
		t.Errorf("a VM was cloned: %+v", fake.VMs())
	}
	if strings.Contains(string(out), fake.Secret) {
		t.Error("CAPMOX's output carries the token secret")
	}
}
