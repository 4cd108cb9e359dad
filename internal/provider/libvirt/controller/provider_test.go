package controller_test

// These tests run the provider (controller.Run, as 'labctl provider
// libvirt' does) against a management cluster in a box with the real
// Cluster API core manager v1.12.10 and the real in-cluster IPAM v1.0.3
// (internal/testing/testbed/box), and against the test's own libvirtd
// (internal/testing/libvirttest: the real daemon and RPC, serving
// libvirt's test driver over TLS on 127.0.0.1). The test driver defines
// and starts domains without running QEMU, so nothing boots here; what
// is checked is what Cluster API and libvirt hold. The test driver has
// no volume streams, so the seed ISOs are recorded (seeds) instead.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/hypervisor"
	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/provider/libvirt/controller"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/nodeimage"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
	code := m.Run()
	libvirttest.StopShared()
	os.Exit(code)
}

const (
	imagePool   = "capl-pool"
	imageVolume = "node.qcow2"
	// memoryAdjustment lets machines reserve 10x the test driver's 3 GiB:
	// its built-in domain "test" alone is configured with 8 GiB.
	memoryAdjustment = 1000
)

// seeds records the seed ISOs the provider uploads, by host and volume.
type seeds struct {
	mu   sync.Mutex
	data map[string][]byte
}

func (s *seeds) upload(host string) libvirt.UploadFunc {
	return func(ctx context.Context, vol string, r io.Reader, _ int64) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.data[host+"/"+vol] = b
		return ctx.Err()
	}
}

func (s *seeds) files(t *testing.T, host, vol string) map[string]string {
	t.Helper()
	s.mu.Lock()
	iso := s.data[host+"/"+vol]
	s.mu.Unlock()
	_, files, err := sshtest.SeedFiles(iso)
	if err != nil {
		t.Fatalf("seed %s on %s: %v", vol, host, err)
	}
	return files
}

// cutter fails each step the first time a reconcile reaches it, as if
// the provider were killed right after it: every later reconcile must
// find what that step made and go on from there.
type cutter struct {
	mu   sync.Mutex
	seen map[string]int
	on   bool
}

func (c *cutter) step(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[name]++
	if c.on && c.seen[name] == 1 {
		return fmt.Errorf("test: cut off after %q", name)
	}
	return nil
}

func (c *cutter) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[name]
}

// bed is one box, one libvirtd, and the provider running against them.
type bed struct {
	c      client.Client
	d      *libvirttest.Daemon
	seeds  *seeds
	cut    *cutter
	images *libvirt.Driver
	// admin is the box's admin kubeconfig.
	admin string
}

func startBed(t *testing.T) *bed {
	t.Helper()
	bd, providerKubeconfig := setupBed(t)
	bd.runInProcess(t, providerKubeconfig)
	return bd
}

// setupBed is a bed with no provider running yet: the box with the
// provider's components, the test libvirtd with the node image. It
// returns the kubeconfig the provider runs with.
func setupBed(t *testing.T) (*bed, string) {
	t.Helper()
	d := libvirttest.Start(t)
	c, providerKubeconfig, admin := newBox(t)
	bd := &bed{c: c, d: d, seeds: &seeds{data: map[string][]byte{}}, cut: &cutter{seen: map[string]int{}}, admin: admin}
	bd.images = placeImage(t, d)
	return bd, providerKubeconfig
}

// newBox starts the box with the real Cluster API core manager and
// in-cluster IPAM, and installs the provider's components; it returns a
// client, the kubeconfig the provider runs with and the admin one.
func newBox(t *testing.T) (client.Client, string, string) {
	t.Helper()
	box.Require(t, "cluster-api", "ipam-in-cluster")
	b := box.Start(t, box.WithProviders("cluster-api", "ipam-in-cluster"))
	s, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(b.Env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c, installComponents(t, c, b.Env.Kubeconfig), b.Env.Kubeconfig
}

// runInProcess runs the provider in the test's process, each machine
// step cut off once while bd.cut is on.
func (bd *bed) runInProcess(t *testing.T, providerKubeconfig string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &testbed.LogBuffer{}
	go func() {
		done <- controller.Run(ctx, controller.Options{
			Kubeconfig: providerKubeconfig, HealthAddr: "127.0.0.1:0", Concurrency: 2,
			Log: logs,
			Tune: func(r *controller.Reconcilers) {
				r.Machine.Retry = time.Second
				r.Cluster.Recheck = 2 * time.Second
				r.Machine.Step = bd.cut.step
				hosts := r.Machine.Hosts
				hosts.DialTimeout = 3 * time.Second
				hosts.Options = func(host string, o *libvirt.Options) { o.Upload = bd.seeds.upload(host) }
				r.Machine.Hosts, r.Cluster.Hosts = hosts, hosts
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the provider ended with %v", err)
		}
		if t.Failed() {
			t.Logf("provider log (last 8 KiB):\n%s", tail(logs.String(), 8<<10))
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// installComponents applies the provider's release components (all but
// the Deployment: the provider runs in the test) as cluster-api-operator
// would, and returns a kubeconfig that acts as the manager's
// ServiceAccount, so the provider runs with only the RBAC it ships.
func installComponents(t *testing.T, c client.Client, kubeconfig string) string {
	t.Helper()
	raw, err := release.Components("labctl:test", []string{"linux/amd64"})
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := r.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 || u.GetKind() == "Deployment" {
			continue
		}
		if u.GetKind() == "CustomResourceDefinition" && u.GetLabels()["cluster.x-k8s.io/v1beta2"] != "v1alpha1" {
			t.Errorf("CRD %s lacks the contract label cluster.x-k8s.io/v1beta2: v1alpha1", u.GetName())
		}
		if err := c.Create(t.Context(), u); err != nil {
			t.Fatalf("the API server refused %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	eventually(t, "the provider's CRDs are served", 30*time.Second, func() (bool, string) {
		var l v1alpha1.LibvirtMachineList
		err := c.List(t.Context(), &l)
		return err == nil, fmt.Sprint(err)
	})
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + release.Namespace + ":capl-manager"
	}
	path := filepath.Join(t.TempDir(), "provider.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	// The API server enforces RBAC: what the role does not grant is refused.
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := client.New(rc, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.List(t.Context(), &corev1.SecretList{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing Secrets as the provider's ServiceAccount: %v; want forbidden (it may only get them)", err)
	}
	return path
}

// placeImage puts the node image on the test libvirtd as 'labctl image
// build' will: EnsureImage from an image server on loopback, checked by
// sha256. It returns the driver, for looking at the pool afterwards.
func placeImage(t *testing.T, d *libvirttest.Daemon) *libvirt.Driver {
	t.Helper()
	return nodeimage.Place(t, d, "images", imagePool, imageVolume)
}

func eventually(t *testing.T, what string, within time.Duration, ok func() (bool, string)) {
	t.Helper()
	until(t, what, within, nil, ok)
}

// workload is one Cluster on the provider: its namespace, LibvirtCluster,
// pool, bootstrap Secret and a MachineDeployment on a
// LibvirtMachineTemplate.
type workload struct {
	ns, name string
	md       *clusterv1.MachineDeployment
}

type workloadSpec struct {
	hosts     []v1alpha1.LibvirtHost
	addresses []string
	memoryMiB int32
	volume    string
	replicas  int32
	// failureDomain pins the pool's machines to a host.
	failureDomain string
	// libvirtCluster names the pool's LibvirtCluster in its template
	// (v1alpha1.ClusterAnnotation), when not the Cluster's.
	libvirtCluster string
	// pool names the MachineDeployment and its template; empty: worker.
	pool string
	// network is the hosts' libvirt network; empty: default.
	network string
	// bootstrap is the machines' cloud-config; empty: bootstrapData.
	bootstrap string
	// imagePool and diskGiB place the root disk; empty: imagePool, 2.
	imagePool string
	diskGiB   int32
}

const bootstrapData = "#cloud-config\nwrite_files:\n- path: /run/labctl-marker\n  content: provisioned by labctl's libvirt provider\n"

// credentials writes the TLS client credentials of daemon d into a
// Secret, as a user would for a qemu+tls host; drop leaves a key out.
func (bd *bed) credentials(t *testing.T, ns, name string, d *libvirttest.Daemon, drop string) string {
	t.Helper()
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			v1alpha1.KeyCA: read(d.CAFile), v1alpha1.KeyTLSCert: read(d.CertFile), v1alpha1.KeyTLSKey: read(d.KeyFile),
		},
	}
	delete(sec.Data, drop)
	if err := bd.c.Create(t.Context(), sec); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return sec.Name
}

// host is a LibvirtHost for daemon d over TLS.
func (bd *bed) host(t *testing.T, ns, name string, d *libvirttest.Daemon) v1alpha1.LibvirtHost {
	t.Helper()
	return v1alpha1.LibvirtHost{
		Name: name, URI: "test+tls://127.0.0.1:" + d.TLSPort + "/default",
		CredentialsRef: v1alpha1.SecretReference{Name: bd.credentials(t, ns, name+"-credentials", d, "")},
	}
}

func (bd *bed) newWorkload(t *testing.T, ns string, ws workloadSpec) *workload {
	t.Helper()
	ctx := t.Context()
	c := bd.c
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if ws.hosts == nil {
		ws.hosts = []v1alpha1.LibvirtHost{bd.host(t, ns, "host-a", bd.d)}
	}
	w := &workload{ns: ns, name: "lab1"}

	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
		"metadata": map[string]any{"namespace": ns, "name": "nodes"},
		"spec": map[string]any{
			"addresses": toAny(ws.addresses), "prefix": int64(24), "gateway": "10.213.0.1",
		},
	}}
	must(c.Create(ctx, pool))
	must(c.Create(ctx, &v1alpha1.LibvirtCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.name},
		Spec: v1alpha1.LibvirtClusterSpec{
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 6443},
			Hosts:                ws.hosts,
			Network:              v1alpha1.NetworkSpec{Network: cmp.Or(ws.network, "default"), DNSServers: []string{"10.213.0.1"}},
			IPPool:               v1alpha1.IPPoolReference{Kind: "InClusterIPPool", Name: "nodes"},
			MemoryAdjustment:     memoryAdjustment,
		},
	}))
	bd.createCluster(t, ns)
	must(c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "worker-bootstrap"},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte(cmp.Or(ws.bootstrap, bootstrapData)), "format": []byte("cloud-config")},
	}))
	if ws.pool == "" {
		ws.pool = "worker"
	}
	w.md = bd.addPool(t, w, ws.pool, ws)
	return w
}

// addPool adds a worker pool to the workload: a LibvirtMachineTemplate
// and a MachineDeployment on it, both named name.
func (bd *bed) addPool(t *testing.T, w *workload, name string, ws workloadSpec) *clusterv1.MachineDeployment {
	t.Helper()
	ctx := t.Context()
	if ws.memoryMiB == 0 {
		ws.memoryMiB = 512
	}
	if ws.volume == "" {
		ws.volume = imageVolume
	}
	var meta clusterv1.ObjectMeta
	if ws.libvirtCluster != "" {
		meta.Annotations = map[string]string{v1alpha1.ClusterAnnotation: ws.libvirtCluster}
	}
	if err := bd.c.Create(ctx, &v1alpha1.LibvirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: v1alpha1.LibvirtMachineTemplateSpec{Template: v1alpha1.LibvirtMachineTemplateResource{
			ObjectMeta: meta,
			Spec: v1alpha1.LibvirtMachineSpec{
				CPUs: 2, MemoryMiB: ws.memoryMiB, DiskGiB: cmp.Or(ws.diskGiB, 2),
				Image:      v1alpha1.ImageVolume{Pool: cmp.Or(ws.imagePool, imagePool), Volume: ws.volume},
				ExtraDisks: []v1alpha1.ExtraDisk{{SizeGiB: 1}},
			},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"pool": name}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: w.name,
			Replicas:    ptr.To(ws.replicas),
			Selector:    metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{
					ClusterName:   w.name,
					Version:       "v1.35.4",
					FailureDomain: ws.failureDomain,
					Bootstrap:     clusterv1.Bootstrap{DataSecretName: ptr.To("worker-bootstrap")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: v1alpha1.GroupVersion.Group, Kind: "LibvirtMachineTemplate", Name: name,
					},
				},
			},
		},
	}
	if err := bd.c.Create(ctx, md); err != nil {
		t.Fatal(err)
	}
	return md
}

// ipamSees waits until in-cluster IPAM binds a claim of the Cluster
// lab1 in namespace ns from its pool nodes, and releases it. IPAM v1.0.3
// cannot decode the v1beta1 Clusters it lists once one has
// status.failureDomains ("cannot unmarshal array into ...
// v1beta1.FailureDomains"), and then skips the claims of Clusters it
// never saw; so a test makes sure IPAM's cache holds its Cluster before
// the provider reports failure domains.
func (bd *bed) ipamSees(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	probe := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ipam-probe", Labels: map[string]string{clusterv1.ClusterNameLabel: "lab1"}},
		Spec: ipamv1.IPAddressClaimSpec{
			ClusterName: "lab1",
			PoolRef:     ipamv1.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: "InClusterIPPool", Name: "nodes"},
		},
	}
	if err := bd.c.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	eventually(t, ns+": IPAM binds a claim of Cluster lab1", 2*time.Minute, func() (bool, string) {
		if err := bd.c.Get(ctx, client.ObjectKeyFromObject(probe), probe); err != nil {
			return false, err.Error()
		}
		return probe.Status.AddressRef.Name != "", fmt.Sprint(probe.Status.Conditions)
	})
	if err := bd.c.Delete(ctx, probe); err != nil {
		t.Fatal(err)
	}
	eventually(t, ns+": the probe's address released", time.Minute, func() (bool, string) {
		var ips ipamv1.IPAddressList
		err := bd.c.List(ctx, &ips, client.InNamespace(ns))
		return err == nil && len(ips.Items) == 0, fmt.Sprint(len(ips.Items), err)
	})
}

// createCluster makes namespace ns and the Cluster lab1 in it, on its
// LibvirtCluster; once made, it is left as it is.
func (bd *bed) createCluster(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	if err := bd.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	err := bd.c.Create(ctx, &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lab1"},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: "LibvirtCluster", Name: "lab1"},
		},
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (bd *bed) libvirtMachines(t *testing.T, ns string) []v1alpha1.LibvirtMachine {
	t.Helper()
	var l v1alpha1.LibvirtMachineList
	if err := bd.c.List(t.Context(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// domains lists the labctl domains of a workload's lab on the libvirtd.
func (bd *bed) domains(t *testing.T, ns string) []hypervisor.VM {
	t.Helper()
	vms, err := bd.images.ListVMs(t.Context(), ns+"/lab1")
	if err != nil {
		t.Fatal(err)
	}
	return vms
}

func condition(conds []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return "<none>"
	}
	return string(c.Status) + "/" + c.Reason + ": " + c.Message
}

func (bd *bed) waitProvisioned(t *testing.T, ns string, n int) []v1alpha1.LibvirtMachine {
	t.Helper()
	return bd.provisioned(t, ns, n, 90*time.Second, nil)
}

// provisioned waits for n provisioned LibvirtMachines in ns, and for
// nothing else; with a provider process, while it runs.
func (bd *bed) provisioned(t *testing.T, ns string, n int, within time.Duration, provider *child) []v1alpha1.LibvirtMachine {
	t.Helper()
	var lms []v1alpha1.LibvirtMachine
	ok := func() (bool, string) {
		lms = bd.libvirtMachines(t, ns)
		done := 0
		var states []string
		for _, lm := range lms {
			if ptr.Deref(lm.Status.Initialization.Provisioned, false) {
				done++
			}
			states = append(states, lm.Name+": "+condition(lm.Status.Conditions, v1alpha1.ReadyCondition))
		}
		return done == n && len(lms) == n, strings.Join(states, "; ")
	}
	what := fmt.Sprintf("%d LibvirtMachines provisioned in %s", n, ns)
	if provider == nil {
		eventually(t, what, within, ok)
	} else {
		whileUp(t, what, within, provider, ok)
	}
	return lms
}

// The whole contract with the real Cluster API: a MachineDeployment on a
// LibvirtMachineTemplate gets a running domain per Machine with its
// providerID and address, whatever step each reconcile is cut off after;
// scaling makes one more; deleting the Cluster leaves no domain, no
// volume and no IPAddress.
func TestMachineDeploymentOnLibvirt(t *testing.T) {
	bd := startBed(t)
	ctx := t.Context()
	bd.cut.mu.Lock()
	bd.cut.on = true
	bd.cut.mu.Unlock()
	ns := "md"
	w := bd.newWorkload(t, ns, workloadSpec{addresses: []string{"10.213.0.10-10.213.0.12"}, replicas: 1})

	// The cluster's infrastructure: provisioned, one failure domain per host.
	eventually(t, "Cluster infrastructure provisioned", 60*time.Second, func() (bool, string) {
		var cl clusterv1.Cluster
		if err := bd.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: w.name}, &cl); err != nil {
			return false, err.Error()
		}
		var lc v1alpha1.LibvirtCluster
		_ = bd.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: w.name}, &lc)
		return ptr.Deref(cl.Status.Initialization.InfrastructureProvisioned, false) && len(cl.Status.FailureDomains) == 1,
			condition(lc.Status.Conditions, v1alpha1.ReadyCondition)
	})

	lm := bd.waitProvisioned(t, ns, 1)[0]
	// Each step was cut off right after it acted, and the reconciles after
	// found its work done: none acted twice.
	for _, s := range []string{controller.StepClaimCreated, controller.StepDefined, controller.StepStarted, controller.StepProviderID} {
		if n := bd.cut.count(s); n != 1 {
			t.Errorf("step %q acted %d times; want once (cut off after, then found done)", s, n)
		}
	}
	if bd.cut.count(controller.StepPlaced) < 2 {
		t.Errorf("the placement step ran %d times; it must have been cut off and run again", bd.cut.count(controller.StepPlaced))
	}
	doms := bd.domains(t, ns)
	if len(doms) != 1 || doms[0].Name != lm.Name || doms[0].UUID != string(lm.UID) || !doms[0].Running {
		t.Fatalf("domains after the cut-off reconciles: %+v; want one running domain %s of UUID %s", doms, lm.Name, lm.UID)
	}
	wantID := "libvirt://host-a/" + string(lm.UID)
	if lm.Spec.ProviderID != wantID || lm.Status.FailureDomain != "host-a" {
		t.Errorf("providerID %q, failure domain %q; want %q on host-a", lm.Spec.ProviderID, lm.Status.FailureDomain, wantID)
	}
	if got := condition(lm.Status.Conditions, v1alpha1.ReadyCondition); !strings.HasPrefix(got, "True/Provisioned") {
		t.Errorf("Ready = %s", got)
	}
	// The Machine, as Cluster API surfaces it.
	eventually(t, "Machine provisioned with providerID and address", 60*time.Second, func() (bool, string) {
		var ms clusterv1.MachineList
		if err := bd.c.List(ctx, &ms, client.InNamespace(ns)); err != nil || len(ms.Items) != 1 {
			return false, fmt.Sprint(len(ms.Items), err)
		}
		m := ms.Items[0]
		return m.Spec.ProviderID == wantID && ptr.Deref(m.Status.Initialization.InfrastructureProvisioned, false) &&
				slices.ContainsFunc(m.Status.Addresses, func(a clusterv1.MachineAddress) bool { return a.Address == "10.213.0.10" }),
			fmt.Sprintf("providerID %q, provisioned %v, addresses %v", m.Spec.ProviderID, m.Status.Initialization.InfrastructureProvisioned, m.Status.Addresses)
	})
	// The seed: bootstrap data, instance-id = domain UUID, the static address.
	files := bd.seeds.files(t, "host-a", lm.Name+"-seed.iso")
	if files["user-data"] != bootstrapData {
		t.Errorf("user-data = %q, want the bootstrap Secret's value", files["user-data"])
	}
	if md := files["meta-data"]; !strings.Contains(md, "instance-id: "+string(lm.UID)) || !strings.Contains(md, "local-hostname: "+lm.Name) {
		t.Errorf("meta-data = %q", md)
	}
	if nc := files["network-config"]; !strings.Contains(nc, "10.213.0.10/24") || !strings.Contains(nc, "via: 10.213.0.1") {
		t.Errorf("network-config = %q", nc)
	}

	// The template publishes the machine size for scale from zero.
	var tmpl v1alpha1.LibvirtMachineTemplate
	eventually(t, "template capacity", 30*time.Second, func() (bool, string) {
		if err := bd.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "worker"}, &tmpl); err != nil {
			return false, err.Error()
		}
		return len(tmpl.Status.Capacity) > 0, fmt.Sprint(tmpl.Status)
	})
	if cpu, mem := tmpl.Status.Capacity[corev1.ResourceCPU], tmpl.Status.Capacity[corev1.ResourceMemory]; cpu.String() != "2" || mem.String() != "512Mi" {
		t.Errorf("capacity cpu %s memory %s, want 2 and 512Mi", cpu.String(), mem.String())
	}

	// Scale to 2: one more domain, the next address.
	bd.cut.mu.Lock()
	bd.cut.on = false
	bd.cut.mu.Unlock()
	if err := bd.c.Patch(ctx, w.md, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`))); err != nil {
		t.Fatal(err)
	}
	lms := bd.waitProvisioned(t, ns, 2)
	if doms := bd.domains(t, ns); len(doms) != 2 {
		t.Fatalf("domains after scaling to 2: %+v", doms)
	}
	var addrs []string
	for _, lm := range lms {
		for _, a := range lm.Status.Addresses {
			if a.Type == clusterv1.MachineInternalIP {
				addrs = append(addrs, a.Address)
			}
		}
	}
	slices.Sort(addrs)
	if !slices.Equal(addrs, []string{"10.213.0.10", "10.213.0.11"}) {
		t.Errorf("addresses %v", addrs)
	}

	// Delete the Cluster, with every deletion step cut off once.
	bd.cut.mu.Lock()
	bd.cut.on = true
	bd.cut.mu.Unlock()
	if err := bd.c.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.name}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Cluster gone", 120*time.Second, func() (bool, string) {
		var cl clusterv1.Cluster
		err := bd.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: w.name}, &cl)
		var states []string
		for _, lm := range bd.libvirtMachines(t, ns) {
			states = append(states, lm.Name+": "+condition(lm.Status.Conditions, v1alpha1.ReadyCondition))
		}
		return apierrors.IsNotFound(err), fmt.Sprint(err, states)
	})
	if n := bd.cut.count(controller.StepDomainDeleted); n != 2 {
		t.Errorf("domains were deleted %d times; want 2 (one per machine, each cut off after)", n)
	}
	if doms := bd.domains(t, ns); len(doms) != 0 {
		t.Errorf("domains left after the Cluster's deletion: %+v", doms)
	}
	for _, v := range bd.volumes(t) {
		if strings.HasPrefix(v, "worker-") {
			t.Errorf("volume %s left after the Cluster's deletion", v)
		}
	}
	var ips ipamv1.IPAddressList
	if err := bd.c.List(ctx, &ips, client.InNamespace(ns)); err != nil || len(ips.Items) != 0 {
		t.Errorf("IPAddresses left: %d (%v)", len(ips.Items), err)
	}
	var lcs v1alpha1.LibvirtClusterList
	if err := bd.c.List(ctx, &lcs, client.InNamespace(ns)); err != nil || len(lcs.Items) != 0 {
		t.Errorf("LibvirtClusters left: %d (%v)", len(lcs.Items), err)
	}
}

// A pool whose hosts are not the Cluster's infrastructure (labctl's KVM
// pool of a cluster on Proxmox): its template names a LibvirtCluster the
// Cluster does not reference. That LibvirtCluster, which Cluster API
// neither owns nor reconciles, is provisioned for the Cluster its label
// names; the pool's machines go on its hosts, not the Cluster's; each
// seed's meta-data carries the providerID the kubelet registers. Deleting
// the Cluster removes the machines, and then the LibvirtCluster can go.
func TestPoolOnHostsTheClusterDoesNotReference(t *testing.T) {
	bd := startBed(t)
	ctx := t.Context()
	ns := "pool"
	w := bd.newWorkload(t, ns, workloadSpec{addresses: []string{"10.213.0.30-10.213.0.39"}, replicas: 0})
	// host-k is the same libvirtd under another name: where a machine
	// lands says whose hosts it was given.
	poolLC := &v1alpha1.LibvirtCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lab1-kvm", Labels: map[string]string{clusterv1.ClusterNameLabel: w.name}},
		Spec: v1alpha1.LibvirtClusterSpec{
			Hosts:            []v1alpha1.LibvirtHost{bd.host(t, ns, "host-k", bd.d)},
			Network:          v1alpha1.NetworkSpec{Network: "default", DNSServers: []string{"10.213.0.1"}},
			IPPool:           v1alpha1.IPPoolReference{Kind: "InClusterIPPool", Name: "nodes"},
			MemoryAdjustment: memoryAdjustment,
		},
	}
	if err := bd.c.Create(ctx, poolLC); err != nil {
		t.Fatal(err)
	}
	bd.addPool(t, w, "kvm", workloadSpec{replicas: 1, libvirtCluster: poolLC.Name})

	eventually(t, "LibvirtCluster lab1-kvm provisioned without an owner", 60*time.Second, func() (bool, string) {
		var lc v1alpha1.LibvirtCluster
		if err := bd.c.Get(ctx, client.ObjectKeyFromObject(poolLC), &lc); err != nil {
			return false, err.Error()
		}
		return ptr.Deref(lc.Status.Initialization.Provisioned, false) && len(lc.OwnerReferences) == 0,
			fmt.Sprintf("owners %v, %s", lc.OwnerReferences, condition(lc.Status.Conditions, v1alpha1.ReadyCondition))
	})
	lm := bd.machineOn(t, ns, "kvm", "host-k")
	if want := "libvirt://host-k/" + string(lm.UID); lm.Spec.ProviderID != want {
		t.Errorf("providerID %q, want %q", lm.Spec.ProviderID, want)
	}
	if md := bd.seeds.files(t, "host-k", lm.Name+"-seed.iso")["meta-data"]; !strings.Contains(md, "provider-id: "+lm.Spec.ProviderID) {
		t.Errorf("meta-data = %q; want provider-id %s for the kubelet", md, lm.Spec.ProviderID)
	}

	if err := bd.c.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.name}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Cluster gone", 120*time.Second, func() (bool, string) {
		err := bd.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: w.name}, &clusterv1.Cluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if doms := bd.domains(t, ns); len(doms) != 0 {
		t.Errorf("domains left after the Cluster's deletion: %+v", doms)
	}
	if err := bd.c.Delete(ctx, poolLC); err != nil {
		t.Fatal(err)
	}
	eventually(t, "LibvirtCluster lab1-kvm gone", 60*time.Second, func() (bool, string) {
		err := bd.c.Get(ctx, client.ObjectKeyFromObject(poolLC), &v1alpha1.LibvirtCluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// volumes lists the image pool's volumes on the libvirtd.
func (bd *bed) volumes(t *testing.T) []string {
	t.Helper()
	names, err := bd.images.VolumeNames(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// machineOn waits for a provisioned LibvirtMachine of the pool on host
// and returns it; exclude skips machines already seen.
func (bd *bed) machineOn(t *testing.T, ns, pool, host string, exclude ...string) v1alpha1.LibvirtMachine {
	t.Helper()
	var got v1alpha1.LibvirtMachine
	eventually(t, fmt.Sprintf("a new %s machine provisioned on %s", pool, host), 90*time.Second, func() (bool, string) {
		var states []string
		for _, lm := range bd.libvirtMachines(t, ns) {
			if !strings.HasPrefix(lm.Name, pool+"-") || slices.Contains(exclude, lm.Name) {
				continue
			}
			states = append(states, lm.Name+" on "+lm.Status.FailureDomain+": "+condition(lm.Status.Conditions, v1alpha1.ReadyCondition))
			if ptr.Deref(lm.Status.Initialization.Provisioned, false) && lm.Status.FailureDomain == host {
				got = lm
				return true, ""
			}
		}
		return false, strings.Join(states, "; ")
	})
	return got
}

func (bd *bed) scale(t *testing.T, md *clusterv1.MachineDeployment, n int) {
	t.Helper()
	if err := bd.c.Patch(t.Context(), md, client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))); err != nil {
		t.Fatal(err)
	}
}

// Two hosts (two libvirtds): a machine goes where most memory is free,
// a pinned pool to its failure domain whatever the memory, and once a
// host stops answering, new machines go to the other while the
// LibvirtCluster's condition names the silent host.
func TestPlacementAcrossHosts(t *testing.T) {
	bd := startBed(t)
	ctx := t.Context()
	d2 := libvirttest.StartPrivate(t)
	images2 := placeImage(t, d2)
	ns := "hosts"
	hosts := func() []v1alpha1.LibvirtHost {
		if err := bd.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		return []v1alpha1.LibvirtHost{bd.host(t, ns, "host-a", bd.d), bd.host(t, ns, "host-b", d2)}
	}()

	// host-a holds a 4 GiB domain of someone else's: host-b has more free.
	filler := hypervisor.VMSpec{
		Lab: "someone-else", Name: "filler", CPUs: 1, MemoryMiB: 4096, DiskGiB: 1,
		CloudInit: hypervisor.CloudInit{UserData: []byte("#cloud-config\n")},
	}
	img, err := bd.images.FindImage(ctx, hypervisor.ImageSpec{FileName: imageVolume})
	if err != nil {
		t.Fatal(err)
	}
	filler.Image = img
	fvm, err := bd.images.CreateVM(ctx, filler)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bd.images.DeleteVM(context.Background(), fvm) })

	w := bd.newWorkload(t, ns, workloadSpec{hosts: hosts, addresses: []string{"10.213.0.20-10.213.0.29"}, replicas: 1})
	first := bd.machineOn(t, ns, "worker", "host-b")
	if vms, _ := images2.ListVMs(ctx, ns+"/lab1"); len(vms) != 1 || vms[0].UUID != string(first.UID) {
		t.Errorf("host-b's domains: %+v; want the one of %s", vms, first.Name)
	}
	if vms := bd.domains(t, ns); len(vms) != 0 {
		t.Errorf("host-a has domains of this cluster: %+v", vms)
	}

	// A pool pinned to host-a goes there though host-b has more free.
	bd.addPool(t, w, "pinned", workloadSpec{replicas: 1, failureDomain: "host-a"})
	pinned := bd.machineOn(t, ns, "pinned", "host-a")
	if !strings.HasPrefix(pinned.Spec.ProviderID, "libvirt://host-a/") {
		t.Errorf("pinned machine's providerID %q", pinned.Spec.ProviderID)
	}

	// host-b stops answering.
	d2.Stop()
	eventually(t, "the LibvirtCluster names the silent host", 60*time.Second, func() (bool, string) {
		var lc v1alpha1.LibvirtCluster
		if err := bd.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: w.name}, &lc); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(lc.Status.Conditions, v1alpha1.HostsReachableCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.HostUnreachableReason &&
			strings.Contains(c.Message, "host-b") && !strings.Contains(c.Message, "host-a:"), condition(lc.Status.Conditions, v1alpha1.HostsReachableCondition)
	})
	bd.scale(t, w.md, 2)
	second := bd.machineOn(t, ns, "worker", "host-a", first.Name)
	if second.Name == first.Name {
		t.Fatal("no second machine")
	}
}

// Each way a machine cannot be made is a condition that says why.
func TestFailureConditions(t *testing.T) {
	bd := startBed(t)
	ctx := t.Context()
	waitReason := func(t *testing.T, ns, pool, reason string, want ...string) {
		t.Helper()
		eventually(t, ns+": a machine with reason "+reason, 60*time.Second, func() (bool, string) {
			var states []string
			for _, lm := range bd.libvirtMachines(t, ns) {
				if !strings.HasPrefix(lm.Name, pool+"-") {
					continue
				}
				c := meta.FindStatusCondition(lm.Status.Conditions, v1alpha1.VirtualMachineProvisionedCondition)
				states = append(states, lm.Name+": "+condition(lm.Status.Conditions, v1alpha1.VirtualMachineProvisionedCondition))
				if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
					continue
				}
				ok := true
				for _, w := range want {
					ok = ok && strings.Contains(c.Message, w)
				}
				if ok {
					return true, ""
				}
			}
			return false, strings.Join(states, "; ")
		})
	}

	// In the box, in-cluster IPAM v1.0.3 cannot decode the v1beta1
	// Clusters it lists once one has status.failureDomains ("cannot
	// unmarshal array into ... v1beta1.FailureDomains"), and then skips
	// the claims of Clusters it never saw ("linked to a cluster that is
	// not found"). The Clusters whose machines need an address are made
	// first, before any has failure domains, so its cache holds them.
	for _, ns := range []string{"full", "noimage", "exhausted"} {
		bd.createCluster(t, ns)
	}
	time.Sleep(2 * time.Second) // for IPAM's watch to see them

	t.Run("no host with room", func(t *testing.T) {
		bd.newWorkload(t, "full", workloadSpec{addresses: []string{"10.213.0.30"}, memoryMiB: 64 << 10, replicas: 1})
		waitReason(t, "full", "worker", v1alpha1.NoHostWithRoomReason, "65536 MiB", "host-a has")
		if vms := bd.domains(t, "full"); len(vms) != 0 {
			t.Errorf("domains made with no room: %+v", vms)
		}
	})
	t.Run("image missing", func(t *testing.T) {
		bd.newWorkload(t, "noimage", workloadSpec{addresses: []string{"10.213.0.31"}, volume: "absent.qcow2", replicas: 1})
		waitReason(t, "noimage", "worker", v1alpha1.ImageMissingReason, "absent.qcow2", imagePool, "host-a")
	})
	t.Run("pool exhausted", func(t *testing.T) {
		bd.newWorkload(t, "exhausted", workloadSpec{addresses: []string{"10.213.0.32"}, replicas: 2})
		waitReason(t, "exhausted", "worker", v1alpha1.IPPoolExhaustedReason, "InClusterIPPool nodes")
		eventually(t, "the machine with the address gets its domain", 60*time.Second, func() (bool, string) {
			n := len(bd.domains(t, "exhausted"))
			return n == 1, fmt.Sprintf("%d domains", n)
		})
		if n := len(bd.domains(t, "exhausted")); n != 1 {
			t.Errorf("%d domains for a pool of one address; want 1", n)
		}
	})
	t.Run("host unreachable", func(t *testing.T) {
		ns := "down"
		if err := bd.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		silent := bd.host(t, ns, "host-down", bd.d)
		silent.URI = "test+tls://127.0.0.1:" + closedPort(t) + "/default"
		w := bd.newWorkload(t, ns, workloadSpec{hosts: []v1alpha1.LibvirtHost{silent}, addresses: []string{"10.213.0.33"}, replicas: 1})
		bd.waitClusterReason(t, ns, w.name, v1alpha1.HostUnreachableReason, "host-down", "nothing answers")
		waitReason(t, ns, "worker", v1alpha1.WaitingForClusterInfrastructureReason)
	})
	t.Run("credentials incomplete", func(t *testing.T) {
		ns := "nokey"
		if err := bd.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		h := v1alpha1.LibvirtHost{
			Name: "host-a", URI: "test+tls://127.0.0.1:" + bd.d.TLSPort + "/default",
			CredentialsRef: v1alpha1.SecretReference{Name: bd.credentials(t, ns, "partial", bd.d, v1alpha1.KeyTLSKey)},
		}
		w := bd.newWorkload(t, ns, workloadSpec{hosts: []v1alpha1.LibvirtHost{h}, addresses: []string{"10.213.0.34"}})
		bd.waitClusterReason(t, ns, w.name, v1alpha1.CredentialsInvalidReason, "host-a", "partial", v1alpha1.KeyTLSKey)
	})
}

func (bd *bed) waitClusterReason(t *testing.T, ns, name, reason string, want ...string) {
	t.Helper()
	eventually(t, ns+": LibvirtCluster HostsReachable "+reason, 60*time.Second, func() (bool, string) {
		var lc v1alpha1.LibvirtCluster
		if err := bd.c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &lc); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(lc.Status.Conditions, v1alpha1.HostsReachableCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason || ptr.Deref(lc.Status.Initialization.Provisioned, false) {
			return false, condition(lc.Status.Conditions, v1alpha1.HostsReachableCondition)
		}
		for _, w := range want {
			if !strings.Contains(c.Message, w) {
				return false, c.Message
			}
		}
		return true, ""
	})
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	return port
}
