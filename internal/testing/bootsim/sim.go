// Package bootsim stands in for what no test here can do: a VM booting,
// with cloud-init and kubeadm running inside it. It listens to the strict
// fake Proxmox VE (pvetest.Server.OnPower): when a VM powers on it reads
// the cloud-init ISO CAPMOX attached (user-data from Cluster API's kubeadm
// bootstrap provider, meta-data and network-config from CAPMOX) and acts
// on it as cloud-init, kubeadm and the kubelet would:
//
//   - kubeadm init: starts the workload cluster's etcd, kube-apiserver,
//     kube-controller-manager and kube-scheduler (the test bed's real
//     binaries) with the cluster PKI from write_files, serving on the
//     control-plane endpoint, and writes what kubeadm init leaves in the
//     cluster (kubeadm-config, kubelet-config, cluster-info, RBAC, the
//     static pods' mirror Pods) and the control-plane Node;
//   - kubeadm join: checks bootstrap-token discovery against the workload
//     cluster and registers the Node the kubelet would;
//   - the real kwok (v0.8.0) keeps those Nodes Ready and runs the Pods
//     scheduled onto them;
//   - a VM powered off or destroyed takes its Node (and, for the first
//     control-plane machine, its control plane) with it.
//
// A VM whose bootstrap cannot be read, or whose providerID does not
// resolve, stays unbooted: the sim logs why and fails the test, as the
// real lab would leave a Machine that never gets a Node.
//
// Lab addresses must be loopback (127.0.0.0/8, which Linux routes
// without setup): the control-plane endpoint (the VIP) and the node
// addresses from CAPMOX's network-config are bound as they are.
package bootsim

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
)

// KwokAnnotation marks the Nodes the sim registers; kwok manages the
// Nodes that carry it (--manage-nodes-with-annotation-selector, kwok's
// documented way to share a cluster with real kubelets:
// kwok.x-k8s.io/node=fake).
const KwokAnnotation = "kwok.x-k8s.io/node"

// Option changes the sim.
type Option func(*Sim)

// WithFailureHandler replaces what the sim does when a VM cannot boot
// (by default: the test's Errorf). For the sim's own tests of refusals.
func WithFailureHandler(f func(msg string)) Option {
	return func(s *Sim) { s.onFail = f }
}

// WithCiliumDelay sets how long after a Node registers the Cilium
// stand-in removes its agent-not-ready taint (default 3 s).
func WithCiliumDelay(d time.Duration) Option {
	return func(s *Sim) { s.ciliumDelay = d }
}

// Sim boots the fake PVE's VMs.
type Sim struct {
	t           testing.TB
	fake        *pvetest.Server
	assets      string
	dir         string
	onFail      func(string)
	ciliumDelay time.Duration
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup

	// hosted finds the control planes the sim does not boot
	// (WithHostedControlPlanes); hostedMu makes one workload of each.
	hosted   func(ctx context.Context, endpoint string) ([]byte, bool, error)
	hostedMu sync.Mutex

	mu       sync.Mutex
	clusters map[string]*workload // by control-plane endpoint host:port
	machines map[int]*machine     // by VMID
	// cloudInit is each powered-on VM's `cloud-init status`.
	cloudInit map[int]string
	failures  []string
	done      bool
}

// workload is one workload cluster the sim serves: a stacked control
// plane of the VMs it booted, or a hosted one (Kamaji) it found.
type workload struct {
	name       string // the ClusterConfiguration's clusterName
	endpoint   string // host:port of controlPlaneEndpoint
	dir        string
	caPEM      []byte
	ca         *pki.CA               // the cluster CA (stacked only)
	kubeconfig string                // super-admin.conf, at the endpoint
	cs         *kubernetes.Clientset // its client
	// vip holds the endpoint for a stacked control plane; nil for a
	// hosted one.
	vip *vip

	mu sync.Mutex
	// members are the stacked control plane's machines, in join order.
	members []*controlPlane
	kwok    *proc
	// kwokAddr is where kwok serves the kubelet API (stacked only); each
	// member's kubelet address forwards there.
	kwokAddr string
	kwokCfg  []string // kwok's default stages
}

type machine struct {
	vmid    int
	node    string
	cluster *workload
	member  *controlPlane // the machine's control plane, nil for a worker
}

func (w *workload) machines() []*controlPlane {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*controlPlane(nil), w.members...)
}

// Start hooks the sim into the fake PVE. It needs the test bed's etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok
// (testbed.Assets skips or fails as for every test bed part); everything
// it starts stops when the test ends.
func Start(t testing.TB, fake *pvetest.Server, opts ...Option) *Sim {
	t.Helper()
	assets := testbed.Assets(t)
	var missing []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("bootsim: %s missing in %s; build them with 'hack/testenv.sh controllers'", strings.Join(missing, ", "), assets)
		if testbed.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sim{t: t, fake: fake, assets: assets, dir: t.TempDir(), ciliumDelay: 3 * time.Second,
		ctx: ctx, cancel: cancel, clusters: map[string]*workload{}, machines: map[int]*machine{}, cloudInit: map[int]string{}}
	s.onFail = func(msg string) { t.Errorf("%s", msg) }
	for _, o := range opts {
		o(s)
	}
	// Cleanups run last-in first-out: the context is cancelled first (a
	// boot under way gives up), then OnPower's cleanup waits for the hook
	// to return for good, then the processes stop.
	t.Cleanup(s.stop)
	fake.OnPower(s.power)
	fake.OnGuestExec(s.guestExec)
	t.Cleanup(s.cancel)
	return s
}

// Failures are the reasons VMs stayed unbooted so far.
func (s *Sim) Failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

// Kubeconfig is super-admin.conf of the workload cluster whose control
// plane serves endpoint (host:port), "" when none does.
func (s *Sim) Kubeconfig(endpoint string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.clusters[endpoint]; w != nil {
		return w.kubeconfig
	}
	return ""
}

func (s *Sim) fail(vmid int, format string, args ...any) {
	msg := fmt.Sprintf("bootsim: VM %d stays unbooted: %s", vmid, fmt.Sprintf(format, args...))
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.cloudInit[vmid] = cloudInitError
	done := s.done
	s.mu.Unlock()
	s.t.Log(msg)
	if !done {
		s.onFail(msg)
	}
}

func (s *Sim) stop() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.clusters {
		if s.t.Failed() {
			for _, m := range w.machines() {
				s.t.Logf("bootsim: workload cluster %s, machine %s's logs:\n%s", w.name, m.node, m.logs())
			}
		}
		w.stopAll()
	}
}

func (w *workload) stopAll() {
	if w.vip != nil {
		w.vip.close()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kwok != nil {
		stopProc(w.kwok)
		w.kwok = nil
	}
	for _, m := range w.members {
		m.stop()
	}
	w.members = nil
}

// cloud-init's `cloud-init status` answers (cloudinit/cmd/status.py:
// "status: <running|done|error>", exit code 0, or 1 for error).
const (
	cloudInitRunning = "running"
	cloudInitDone    = "done"
	cloudInitError   = "error"
)

// guestExec is the guest agent's exec inside a VM the sim boots (the
// image-builder template has qemu-guest-agent): CAPMOX asks
// `cloud-init status` until it is no longer running
// (pkg/proxmox/goproxmox/api_client.go CloudInitStatus, v0.9.0). Until
// the sim has acted on the VM's power-on, cloud-init is still running.
func (s *Sim) guestExec(vm pvetest.VM, argv []string) (pvetest.GuestExec, bool) {
	if len(argv) != 2 || argv[0] != "cloud-init" || argv[1] != "status" {
		return pvetest.GuestExec{}, false
	}
	s.mu.Lock()
	st, ok := s.cloudInit[vm.ID]
	s.mu.Unlock()
	if !ok {
		st = cloudInitRunning
	}
	res := pvetest.GuestExec{Out: "status: " + st + "\n"}
	if st == cloudInitError {
		res.ExitCode = 1
	}
	return res, true
}

// power is the fake PVE's hook: one event at a time, in order.
func (s *Sim) power(ev pvetest.PowerEvent) {
	if s.ctx.Err() != nil {
		return
	}
	switch ev.Change {
	case pvetest.PowerOn:
		s.boot(ev.VM)
	case pvetest.PowerOff, pvetest.Destroyed:
		s.halt(ev.VM)
	}
}

// cdromISO finds the cloud-init ISO CAPMOX mounted (ide0, "storage:iso/
// user-data-<vmid>.iso,media=cdrom"; go-proxmox v0.6.0 CloudInit).
func cdromISO(vm pvetest.VM) (storage, volid string, ok bool) {
	for _, k := range []string{"ide0", "ide1", "ide2", "ide3", "sata0", "scsi1"} {
		v := vm.Config[k]
		file, opts, _ := strings.Cut(v, ",")
		if !strings.Contains(opts, "media=cdrom") || !strings.Contains(file, ":iso/") {
			continue
		}
		st, _, _ := strings.Cut(file, ":")
		return st, file, true
	}
	return "", "", false
}

func (s *Sim) boot(vm pvetest.VM) {
	s.mu.Lock()
	s.cloudInit[vm.ID] = cloudInitRunning
	s.mu.Unlock()
	st, volid, ok := cdromISO(vm)
	if !ok {
		s.fail(vm.ID, "no cloud-init ISO on a cdrom drive in its config %v", vm.Config)
		return
	}
	iso, ok := s.fake.Volume(vm.Node, st, volid)
	if !ok {
		s.fail(vm.ID, "its cdrom %s is not on node %s's storage %s", volid, vm.Node, st)
		return
	}
	seed, err := ReadSeed(iso)
	if err != nil {
		s.fail(vm.ID, "%s: %v", volid, err)
		return
	}
	b, err := ParseBootstrap(seed)
	if err != nil {
		s.fail(vm.ID, "%s: %v", volid, err)
		return
	}
	mac := ""
	if net0 := vm.Config["net0"]; net0 != "" {
		model, _, _ := strings.Cut(net0, ",")
		_, mac, _ = strings.Cut(model, "=")
	}
	ip, err := NodeAddress(seed.NetworkConfig, mac)
	if err != nil {
		s.fail(vm.ID, "%s: %v", volid, err)
		return
	}
	capacity, err := vmCapacity(vm)
	if err != nil {
		s.fail(vm.ID, "%v", err)
		return
	}
	kubelet, err := imageKubelet(vm)
	if err != nil {
		s.fail(vm.ID, "%v", err)
		return
	}
	var w *workload
	var member *controlPlane
	switch b.Action {
	case Init:
		if err := kubeletSkew(kubelet, b.Cluster.KubernetesVersion); err != nil {
			s.fail(vm.ID, "kubeadm init: %v", err)
			return
		}
		if w, member, err = s.initCluster(vm.ID, b, ip); err != nil {
			s.fail(vm.ID, "kubeadm init: %v", err)
			return
		}
	case Join:
		if w, err = s.discover(b); err != nil {
			s.fail(vm.ID, "kubeadm join: %v", err)
			return
		}
		cc, err := clusterConfiguration(s.ctx, w)
		if err != nil {
			s.fail(vm.ID, "kubeadm join: %v", err)
			return
		}
		if err := kubeletSkew(kubelet, cc.KubernetesVersion); err != nil {
			s.fail(vm.ID, "kubeadm join: %v", err)
			return
		}
		if b.Node.ControlPlane {
			if member, err = s.joinControlPlane(vm.ID, w, b, cc, ip); err != nil {
				s.fail(vm.ID, "kubeadm join --control-plane: %v", err)
				return
			}
		}
	}
	if err := s.register(w, b.Node, ip, kubelet, member, capacity); err != nil {
		s.fail(vm.ID, "the kubelet registering Node %s: %v", b.Node.Name, err)
		return
	}
	s.mu.Lock()
	s.machines[vm.ID] = &machine{vmid: vm.ID, node: b.Node.Name, cluster: w, member: member}
	s.cloudInit[vm.ID] = cloudInitDone
	s.mu.Unlock()
	s.t.Logf("bootsim: VM %d booted: kubeadm %s, Node %s (%s, %s), kubelet %s", vm.ID, b.Action, b.Node.Name, b.Node.ProviderID, ip, kubelet)
}

// imageKubelet is the kubelet version of the image the VM was cloned
// from. labctl tags each node template with the Kubernetes version
// image-builder baked into it (config.Image.TemplateTags), and Proxmox
// copies a template's tags into every clone. A VM without that tag stays
// unbooted: the sim will not make a version up.
func imageKubelet(vm pvetest.VM) (string, error) {
	for _, tag := range vm.Tags() {
		if v, ok := strings.CutPrefix(tag, "kubernetes-"); ok {
			if _, err := version.ParseSemantic(v); err == nil {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("its tags %v carry no kubernetes-<version> of its template, so nothing tells which kubelet its image holds", vm.Tags())
}

// kubeletSkew is kubeadm's KubeletVersionCheck preflight
// (cmd/kubeadm/app/preflight/checks.go, k8s.io/kubernetes v1.35.4): a
// kubelet of a newer minor than the control plane is an error, as is one
// more than three minors older (the version skew policy).
func kubeletSkew(kubelet, controlPlane string) error {
	k, err := version.ParseSemantic(kubelet)
	if err != nil {
		return fmt.Errorf("kubelet version %q: %w", kubelet, err)
	}
	c, err := version.ParseSemantic(controlPlane)
	if err != nil {
		return fmt.Errorf("control plane version %q: %w", controlPlane, err)
	}
	if k.Major() > c.Major() || k.Minor() > c.Minor() {
		return fmt.Errorf("the kubelet version is higher than the control plane version. This is not a supported version skew and may lead to a malfunctional cluster. Kubelet version: %q Control plane version: %q", kubelet, controlPlane)
	}
	if c.Minor() > k.Minor()+3 {
		return fmt.Errorf("kubelet %s is more than three minors older than the control plane %s", kubelet, controlPlane)
	}
	return nil
}

// clusterConfiguration is the cluster's ClusterConfiguration as kubeadm
// join reads it: kube-system/kubeadm-config, which Cluster API's KCP
// moves to a new kubernetesVersion before it rolls the control plane
// (controlplane/kubeadm/internal/controllers/update.go, v1.12.10).
func clusterConfiguration(ctx context.Context, w *workload) (*ClusterConfiguration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cm, err := w.cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading kube-system/kubeadm-config: %w", err)
	}
	raw := cm.Data["ClusterConfiguration"]
	cc := &ClusterConfiguration{Raw: raw}
	if err := yaml.Unmarshal([]byte(raw), cc); err != nil {
		return nil, fmt.Errorf("kube-system/kubeadm-config's ClusterConfiguration: %w", err)
	}
	return cc, nil
}

// halt: the guest is gone. Its Node goes, and its control-plane
// processes with it; the cluster stops with its last control-plane
// machine.
func (s *Sim) halt(vm pvetest.VM) {
	s.mu.Lock()
	m := s.machines[vm.ID]
	delete(s.machines, vm.ID)
	delete(s.cloudInit, vm.ID)
	s.mu.Unlock()
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	if err := m.cluster.cs.CoreV1().Nodes().Delete(ctx, m.node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.t.Logf("bootsim: VM %d halted; deleting its Node %s: %v", vm.ID, m.node, err)
	}
	if m.member != nil {
		w := m.cluster
		m.member.stop()
		w.mu.Lock()
		w.members = slices.DeleteFunc(w.members, func(c *controlPlane) bool { return c == m.member })
		last := len(w.members) == 0
		w.mu.Unlock()
		if last {
			s.mu.Lock()
			delete(s.clusters, w.endpoint)
			s.mu.Unlock()
			w.stopAll()
		} else if err := s.restartKwok(ctx, w); err != nil {
			s.t.Logf("bootsim: VM %d halted; restarting kwok without its etcd forward: %v", vm.ID, err)
		}
	}
	s.t.Logf("bootsim: VM %d halted; Node %s removed", vm.ID, m.node)
}

// vmCapacity is what the kubelet reports for the VM's hardware: cores ×
// sockets CPUs and the configured memory; 110 pods (the kubelet's
// default maxPods). Allocatable takes the kubelet's default hard eviction
// threshold, memory.available<100Mi, off the memory
// (pkg/kubelet/cm/node_container_manager_linux.go), with no kube- or
// system-reserved. (A real guest's MemTotal is a little below the
// configured memory: the kernel keeps some.)
func vmCapacity(vm pvetest.VM) (corev1.ResourceList, error) {
	cores, sockets := atoiOr(vm.Config["cores"], 1), atoiOr(vm.Config["sockets"], 1)
	mem := atoiOr(vm.Config["memory"], 0)
	if cores <= 0 || sockets <= 0 || mem <= 0 {
		return nil, fmt.Errorf("config cores %q, sockets %q, memory %q give no hardware", vm.Config["cores"], vm.Config["sockets"], vm.Config["memory"])
	}
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(cores*sockets), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(mem)<<20, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
	}, nil
}

func atoiOr(s string, def int) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		return def
	}
	return n
}

// initCluster is kubeadm init on the first control-plane machine.
func (s *Sim) initCluster(vmid int, b *Bootstrap, ip net.IP) (*workload, *controlPlane, error) {
	s.mu.Lock()
	if _, taken := s.clusters[b.APIServerEndpoint]; taken {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("a control plane already serves %s (a second kubeadm init for one endpoint)", b.APIServerEndpoint)
	}
	s.mu.Unlock()
	dir := filepath.Join(s.dir, fmt.Sprintf("vm-%d", vmid))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()
	cp, err := startControlPlane(ctx, memberSpec{cluster: b.Cluster, node: b.Node.Name, nodeIP: ip, bindPort: b.BindPort,
		files: b.Files, assets: s.assets, dir: dir})
	if err != nil {
		return nil, nil, err
	}
	w := &workload{name: b.Cluster.ClusterName, endpoint: b.Cluster.ControlPlaneEndpoint, dir: filepath.Join(s.dir, "cluster-"+b.Cluster.ClusterName),
		caPEM: b.Files[pkiDir+"/ca.crt"], kubeconfig: filepath.Join(dir, "super-admin.conf"), members: []*controlPlane{cp}}
	fail := func(err error) (*workload, *controlPlane, error) {
		w.stopAll()
		return nil, nil, err
	}
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return fail(err)
	}
	if w.ca, err = loadCA(b.Files, "ca"); err != nil {
		return fail(err)
	}
	admin, err := clientcmd.BuildConfigFromFlags("", w.kubeconfig)
	if err != nil {
		return fail(err)
	}
	if w.cs, err = kubernetes.NewForConfig(admin); err != nil {
		return fail(err)
	}
	if w.vip, err = startVIP(s.ctx, w.endpoint, w.machines); err != nil {
		return fail(err)
	}
	if err := uploadKubeadmState(ctx, w, b); err != nil {
		s.t.Logf("bootsim: %s", cp.logs())
		return fail(err)
	}
	if err := s.startKwok(ctx, w, true); err != nil {
		return fail(err)
	}
	s.serve(b.APIServerEndpoint, w)
	return w, cp, nil
}

// joinControlPlane is kubeadm join --control-plane on a machine of a
// stacked control plane: its own etcd member, added to the running
// cluster, and its own kube-apiserver, kube-controller-manager and
// kube-scheduler at the version of the cluster's ClusterConfiguration;
// kwok then forwards its etcd Pod's port too.
func (s *Sim) joinControlPlane(vmid int, w *workload, b *Bootstrap, cc *ClusterConfiguration, ip net.IP) (*controlPlane, error) {
	if w.vip == nil {
		return nil, fmt.Errorf("the control plane at %s is hosted; nothing here joins it as a control-plane machine", w.endpoint)
	}
	dir := filepath.Join(s.dir, fmt.Sprintf("vm-%d", vmid))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 4*time.Minute)
	defer cancel()
	cp, err := startControlPlane(ctx, memberSpec{cluster: cc, node: b.Node.Name, nodeIP: ip, bindPort: b.BindPort,
		files: b.Files, assets: s.assets, dir: dir, joinEtcd: etcdJoin(w.cs, filepath.Join(dir, "pki"), b.Node.Name)})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.members = append(w.members, cp)
	w.mu.Unlock()
	if err := s.restartKwok(ctx, w); err != nil {
		return nil, err
	}
	return cp, nil
}

// serve makes w the cluster whose control plane answers at endpoint,
// with the Cilium stand-in acting on its Nodes.
func (s *Sim) serve(endpoint string, w *workload) {
	s.mu.Lock()
	s.clusters[endpoint] = w
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.ciliumLoop(w)
	}()
}

// uploadKubeadmState writes what kubeadm init's later phases leave in
// the cluster and Cluster API reads (k8s.io/kubernetes v1.35.4
// cmd/kubeadm/app/phases): upload-config's kubeadm-config ConfigMap
// (ClusterConfiguration, uploadconfig/uploadconfig.go) and kubelet-config
// ConfigMap (key "kubelet", kubelet/config.go CreateConfigMap) with their
// Roles and RoleBindings, bootstrap-token's cluster-info ConfigMap in
// kube-public (bootstraptoken/clusterinfo/clusterinfo.go) and the
// ClusterRoleBindings that let bootstrap tokens join
// (bootstraptoken/node/tlsbootstrap.go), the admin.conf binding
// kubeadm:cluster-admins (kubeconfig/kubeconfig.go
// EnsureAdminClusterRoleBinding), and the mirror Pods the kubelet makes
// for the static pods (labels component and tier as
// cmd/kubeadm/app/util/staticpod/utils.go ComponentPod), which Cluster
// API's KubeadmControlPlane checks (controlplane/kubeadm/internal/
// workload_cluster_conditions.go, v1.12.10). The CoreDNS and kube-proxy
// addons are not installed: nothing here runs them, and KCP skips their
// upgrade when they are absent.
func uploadKubeadmState(ctx context.Context, w *workload, b *Bootstrap) error {
	cs := w.cs
	sys, pub := metav1.NamespaceSystem, metav1.NamespacePublic
	cms := []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: sys}, Data: map[string]string{"ClusterConfiguration": b.Cluster.Raw}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kubelet-config", Namespace: sys}, Data: map[string]string{"kubelet": kubeletConfig(b)}},
	}
	clusterInfo, err := clusterInfoKubeconfig(w)
	if err != nil {
		return err
	}
	cms = append(cms, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: pub}, Data: map[string]string{"kubeconfig": clusterInfo}})
	for _, cm := range cms {
		if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("upload-config: ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
	}
	bootstrappers := rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:bootstrappers:kubeadm:default-node-token"}
	nodes := rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:nodes"}
	roles := []*rbacv1.Role{
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:nodes-kubeadm-config", Namespace: sys}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"kubeadm-config"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:kubelet-config", Namespace: sys}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"kubelet-config"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:bootstrap-signer-clusterinfo", Namespace: pub}, Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"cluster-info"}}}},
	}
	for _, r := range roles {
		if _, err := cs.RbacV1().Roles(r.Namespace).Create(ctx, r, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("RBAC: Role %s: %w", r.Name, err)
		}
	}
	rbs := []*rbacv1.RoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:nodes-kubeadm-config", Namespace: sys}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:nodes-kubeadm-config"}, Subjects: []rbacv1.Subject{bootstrappers, nodes}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:kubelet-config", Namespace: sys}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:kubelet-config"}, Subjects: []rbacv1.Subject{bootstrappers, nodes}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:bootstrap-signer-clusterinfo", Namespace: pub}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubeadm:bootstrap-signer-clusterinfo"}, Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "system:anonymous"}}},
	}
	for _, rb := range rbs {
		if _, err := cs.RbacV1().RoleBindings(rb.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("RBAC: RoleBinding %s: %w", rb.Name, err)
		}
	}
	crbs := []*rbacv1.ClusterRoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:cluster-admins"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}, Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "kubeadm:cluster-admins"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:kubelet-bootstrap"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"}, Subjects: []rbacv1.Subject{bootstrappers}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-autoapprove-bootstrap"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}, Subjects: []rbacv1.Subject{bootstrappers}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-autoapprove-certificate-rotation"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"}, Subjects: []rbacv1.Subject{nodes}},
	}
	for _, crb := range crbs {
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("RBAC: ClusterRoleBinding %s: %w", crb.Name, err)
		}
	}
	return nil
}

// kubeletConfig is the KubeletConfiguration kubeadm uploads: its
// defaults for what it sets (cmd/kubeadm/app/componentconfigs/kubelet.go
// Default: cgroupDriver systemd, clusterDNS the tenth service address,
// clusterDomain, authentication by the cluster CA, rotation on).
func kubeletConfig(b *Bootstrap) string {
	domain := b.Cluster.Networking.DNSDomain
	if domain == "" {
		domain = "cluster.local"
	}
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
cgroupDriver: systemd
clusterDomain: ` + domain + `
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
`
}

// clusterInfoKubeconfig is cluster-info's kubeconfig: the CA and the
// endpoint, no user (clusterinfo.go CreateBootstrapConfigMapIfNotExists).
func clusterInfoKubeconfig(w *workload) (string, error) {
	data, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config", "preferences": map[string]any{},
		"clusters": []any{map[string]any{"name": "", "cluster": map[string]any{
			"certificate-authority-data": w.caPEM, "server": "https://" + w.endpoint}}},
		"contexts": []any{}, "current-context": "", "users": []any{},
	})
	return string(data), err
}

// mirrorPods are the kubelet's mirror Pods of kubeadm's static pods on
// a control-plane machine (kube-system/<component>-<node>, labels
// component and tier, the kubernetes.io/config.mirror annotation, the
// images at the machine's version), for KCP's checks; the etcd Pod
// carries its client URL as kubeadm's manifest does, for kubeadm join.
func mirrorPods(cp *controlPlane) []*corev1.Pod {
	var out []*corev1.Pod
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		ann := map[string]string{"kubernetes.io/config.mirror": "bootsim", "kubernetes.io/config.source": "file"}
		image := "registry.k8s.io/" + c + ":" + cp.version
		switch c {
		case "etcd":
			ann[etcdAdvertiseAnnotation] = "https://" + net.JoinHostPort(cp.nodeIP.String(), "2379")
			image = "registry.k8s.io/etcd"
		case "kube-apiserver":
			ann["kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"] = cp.apiAddr
		}
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: c + "-" + cp.node, Namespace: metav1.NamespaceSystem,
				Labels:      map[string]string{"component": c, "tier": "control-plane"},
				Annotations: ann,
			},
			Spec: corev1.PodSpec{
				NodeName: cp.node, HostNetwork: true, PriorityClassName: "system-node-critical",
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
				Containers:  []corev1.Container{{Name: c, Image: image}},
			},
		})
	}
	return out
}

// discover is kubeadm join's bootstrap-token discovery
// (cmd/kubeadm/app/discovery/token/token.go): the endpoint must serve a
// cluster whose CA matches a caCertHashes pin, and the token must be a
// live bootstrap token of it (kube-system/bootstrap-token-<id> with
// usage-bootstrap-authentication, unexpired), which Cluster API's kubeadm
// bootstrap provider creates. kubeadm retries until its discovery
// timeout (5 minutes by default); so does this.
func (s *Sim) discover(b *Bootstrap) (*workload, error) {
	deadline := time.Now().Add(5 * time.Minute)
	var last error
	for {
		s.mu.Lock()
		w := s.clusters[b.APIServerEndpoint]
		s.mu.Unlock()
		if w == nil {
			w, last = s.hostedCluster(b.APIServerEndpoint)
		}
		switch {
		case last != nil:
		case w == nil:
			last = fmt.Errorf("nothing serves discovery.bootstrapToken.apiServerEndpoint %s", b.APIServerEndpoint)
		default:
			if last = checkToken(s.ctx, w, b); last == nil {
				return w, nil
			}
		}
		if time.Now().After(deadline) {
			if w != nil {
				last = fmt.Errorf("%w; %s", last, tokenState(s.ctx, w.cs))
				for _, m := range w.machines() {
					last = fmt.Errorf("%w; machine %s's bootstrapsigner log:\n%s", last, m.node, m.signerLog(10))
				}
			}
			return nil, last
		}
		select {
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// tokenState says what a failed discovery found in the cluster: its
// bootstrap tokens, which of them cluster-info is signed for, and which
// kube-controller-manager (whose bootstrapsigner signs) holds the lease.
func tokenState(ctx context.Context, cs kubernetes.Interface) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var parts []string
	secrets, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken)})
	if err != nil {
		parts = append(parts, fmt.Sprintf("listing bootstrap tokens: %v", err))
	} else {
		var tokens []string
		for _, sec := range secrets.Items {
			if sec.Type != corev1.SecretTypeBootstrapToken {
				continue
			}
			tokens = append(tokens, fmt.Sprintf("%s (expiration %s, signing %s, created %s)", sec.Data["token-id"], sec.Data["expiration"],
				sec.Data["usage-bootstrap-signing"], sec.CreationTimestamp.UTC().Format(time.TimeOnly)))
		}
		parts = append(parts, fmt.Sprintf("kube-system's bootstrap tokens: %v", tokens))
	}
	if cm, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{}); err != nil {
		parts = append(parts, fmt.Sprintf("reading cluster-info: %v", err))
	} else {
		parts = append(parts, fmt.Sprintf("cluster-info (resourceVersion %s) signed for %v", cm.ResourceVersion, signedFor(cm)))
	}
	if l, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, "kube-controller-manager", metav1.GetOptions{}); err != nil {
		parts = append(parts, fmt.Sprintf("reading the kube-controller-manager lease: %v", err))
	} else if l.Spec.HolderIdentity != nil {
		renewed := ""
		if l.Spec.RenewTime != nil {
			renewed = l.Spec.RenewTime.UTC().Format(time.TimeOnly)
		}
		parts = append(parts, fmt.Sprintf("kube-controller-manager's lease held by %s, renewed %s", *l.Spec.HolderIdentity, renewed))
	}
	return strings.Join(parts, "; ")
}

// checkToken is the join's discovery (tokenDiscovery) and then what the
// kubelet's TLS bootstrap needs of the token: a live bootstrap token of
// the cluster, read with the cluster's admin client.
func checkToken(ctx context.Context, w *workload, b *Bootstrap) error {
	ca, err := tokenDiscovery(ctx, b)
	if err != nil {
		return err
	}
	if len(b.CACertHashes) > 0 {
		h, err := caCertHash(ca)
		if err != nil {
			return err
		}
		found := false
		for _, want := range b.CACertHashes {
			found = found || strings.EqualFold(want, h)
		}
		if !found {
			return fmt.Errorf("the cluster CA at %s is %s, none of caCertHashes %v", b.APIServerEndpoint, h, b.CACertHashes)
		}
	}
	id, secret, _ := strings.Cut(b.Token, ".")
	sec, err := w.cs.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("bootstrap token %s: %w", id, err)
	}
	if string(sec.Data["token-secret"]) != secret || string(sec.Data["usage-bootstrap-authentication"]) != "true" {
		return fmt.Errorf("bootstrap token %s does not authenticate this secret", id)
	}
	if exp := string(sec.Data["expiration"]); exp != "" {
		if t, err := time.Parse(time.RFC3339, exp); err == nil && time.Now().After(t) {
			return fmt.Errorf("bootstrap token %s expired at %s", id, exp)
		}
	}
	return nil
}

// register creates the Node as the kubelet's registerWithAPIServer does
// (pkg/kubelet/kubelet_node_status.go initialNode: labels, taints from
// --register-with-taints, providerID, capacity and allocatable, the
// addresses), marked for kwok; on the first control-plane machine also
// the static pods' mirror Pods.
func (s *Sim) register(w *workload, n NodeSpec, ip net.IP, kubelet string, member *controlPlane, capacity corev1.ResourceList) error {
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	alloc := capacity.DeepCopy()
	mem := alloc[corev1.ResourceMemory]
	mem.Sub(resource.MustParse("100Mi"))
	alloc[corev1.ResourceMemory] = mem
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, Annotations: map[string]string{
			KwokAnnotation:                 "fake",
			"node.alpha.kubernetes.io/ttl": "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		}},
		Spec: corev1.NodeSpec{ProviderID: n.ProviderID, Taints: n.Taints},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: alloc,
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: n.Name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: kubeletPort}},
			// The kubelet reports its own version; kwok's node-initialize
			// stage keeps what is there.
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubelet},
		},
	}
	if _, err := w.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return err
	}
	if member == nil {
		return nil
	}
	for _, p := range mirrorPods(member) {
		if _, err := w.cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("mirror Pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// kubeletPort is the kubelet's API port (its --port default, which it
// reports in status.daemonEndpoints).
const kubeletPort = 10250

// startKwok runs the real kwok against the workload cluster, managing the
// Nodes the sim marks, with kwok's own default stages (node-initialize,
// node-heartbeat, pod-ready, pod-complete, pod-delete from the module's
// kustomize/stage, as kwokctl's runtime gives kwok when no stages are
// configured: pkg/kwokctl/runtime/cluster.go, v0.8.0). For a stacked
// control plane kwok also serves the kubelet API (restartKwok).
func (s *Sim) startKwok(ctx context.Context, w *workload, stacked bool) error {
	root, err := testbed.ModuleRoot()
	if err != nil {
		return err
	}
	m, err := upstream.Locate(ctx, root, upstream.Provider{Name: "kwok", Wrapper: "kwok", Module: "sigs.k8s.io/kwok"})
	if err != nil {
		return err
	}
	for _, f := range []string{"node/fast/node-initialize.yaml", "node/heartbeat/node-heartbeat.yaml",
		"pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml"} {
		data, err := os.ReadFile(filepath.Join(m.Dir, "kustomize", "stage", filepath.FromSlash(f)))
		if err != nil {
			return fmt.Errorf("kwok's default stages: %w", err)
		}
		w.kwokCfg = append(w.kwokCfg, strings.TrimSpace(string(data)))
	}
	if stacked {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		w.kwokAddr = l.Addr().String()
		_ = l.Close()
	}
	return s.restartKwok(ctx, w)
}

// restartKwok (re)starts kwok with a PortForward of each control-plane
// machine's etcd Pod port 2379 to that machine's etcd: the API server's
// pods/portforward reaches kwok through the kubelet address of the
// machine (each forwards its port 10250 to kwok's server), which is how
// KubeadmControlPlane talks to etcd (controlplane/kubeadm/internal/
// etcd_client_generator.go, v1.12.10). kwok reads PortForwards from its
// config file at start, so a machine that joins or leaves restarts it;
// the Nodes' heartbeats pause for that second. For a hosted control
// plane there is neither: kwok only keeps the workers.
func (s *Sim) restartKwok(ctx context.Context, w *workload) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kwok != nil {
		stopProc(w.kwok)
		w.kwok = nil
	}
	stages := slices.Clone(w.kwokCfg)
	args := []string{"--manage-nodes-with-annotation-selector=" + KwokAnnotation + "=fake"}
	if w.kwokAddr != "" && len(w.members) > 0 {
		var names []string
		var ips []net.IP
		for _, cp := range w.members {
			stages = append(stages, fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: PortForward
metadata:
  name: etcd-%s
  namespace: kube-system
spec:
  forwards:
  - ports: [2379]
    target:
      port: 2379
      address: %s`, cp.node, cp.nodeIP))
			names, ips = append(names, cp.node), append(ips, cp.nodeIP)
			if cp.kubelet == nil {
				l, err := net.Listen("tcp", net.JoinHostPort(cp.nodeIP.String(), fmt.Sprint(kubeletPort)))
				if err != nil {
					return fmt.Errorf("the kubelet API of %s: %w", cp.node, err)
				}
				cp.kubelet = l
				addr := w.kwokAddr
				go runner.Pipe(l, func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) })
			}
		}
		// The kubelet's serving certificate (the kubelet makes a
		// self-signed one; the API server does not check it without
		// --kubelet-certificate-authority, as kubeadm leaves it).
		serving, err := w.ca.Serving(names, ips)
		if err != nil {
			return err
		}
		base := filepath.Join(w.dir, "kubelet")
		if err := writePair(base, serving); err != nil {
			return err
		}
		args = append(args, "--node-ip="+w.members[0].nodeIP.String(), "--server-address="+w.kwokAddr,
			"--tls-cert-file="+base+".crt", "--tls-private-key-file="+base+".key")
	}
	cfg := filepath.Join(w.dir, "kwok.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Join(stages, "\n---\n")+"\n"), 0o600); err != nil {
		return err
	}
	p, err := startProc(filepath.Join(s.assets, "kwok"), w.dir, append([]string{"--kubeconfig=" + w.kubeconfig, "--config=" + cfg}, args...)...)
	if err != nil {
		return err
	}
	w.kwok = p
	return nil
}

func startProc(bin, dir string, args ...string) (*proc, error) {
	cp := &controlPlane{dir: dir}
	if err := cp.run(bin, args...); err != nil {
		return nil, err
	}
	return cp.procs[0], nil
}

func stopProc(p *proc) {
	(&controlPlane{procs: []*proc{p}}).stop()
}

// CiliumTaint is the taint the cilium-operator lifts from a Node once the
// Cilium agent Pod on it is Ready.
const CiliumTaint = "node.cilium.io/agent-not-ready"

// ciliumLoop stands in for Cilium's agent and operator on Nodes. In Cilium
// 1.18.4 the operator, not the agent, lifts node.cilium.io/agent-not-ready:
// operator/watchers/node_taint.go checkAndMarkNode removes it (a JSON
// patch of spec.taints) once nodeHasCiliumPod finds a Pod labelled
// k8s-app=cilium on that Node, not being deleted, whose latest Ready
// condition is True; on by default (--remove-cilium-node-taints,
// operator/cmd/flags.go; the chart's operator.removeNodeTaints: true).
// It acts only once Cilium is installed, found by the chart's ConfigMap
// cilium-config in kube-system (the chart's templates/cilium-configmap.yaml),
// which both ways labctl installs Cilium make: a
// Helm release for a kubeadm cluster, a tenant's ClusterResourceSet
// (internal/clusterapi). A Node's agent is taken to be ready ciliumDelay
// after the later of the Node's registration and the ConfigMap's
// creation.
func (s *Sim) ciliumLoop(w *workload) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(time.Second):
		}
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		s.liftCiliumTaints(ctx, w)
		cancel()
	}
}

func (s *Sim) liftCiliumTaints(ctx context.Context, w *workload) {
	cm, err := w.cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "cilium-config", metav1.GetOptions{})
	if err != nil {
		return
	}
	deployed := cm.CreationTimestamp.Time
	nodes, err := w.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, n := range nodes.Items {
		ready := n.CreationTimestamp.Time
		if deployed.After(ready) {
			ready = deployed
		}
		if time.Since(ready) < s.ciliumDelay {
			continue
		}
		var kept []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != CiliumTaint {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(n.Spec.Taints) {
			continue
		}
		n.Spec.Taints = kept
		if _, err := w.cs.CoreV1().Nodes().Update(ctx, &n, metav1.UpdateOptions{}); err == nil {
			s.t.Logf("bootsim: the Cilium stand-in lifted %s from Node %s", CiliumTaint, n.Name)
		}
	}
}
