package mgmt_test

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	lv "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ipamv1 "sigs.k8s.io/cluster-api/api/ipam/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/provider/libvirt/controller"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/libvirttest"
	"github.com/labctl/labctl/internal/testing/nodeimage"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/versions"
)

// Two releases of labctl, built from this checkout with only the
// linker's version between them: the libvirt provider goes from one to
// the other.
const (
	libvirtFrom = "v0.9.0"
	libvirtTo   = "v0.9.1"
)

// The workload's KVM host: the test's own libvirtd, its pool and node image.
const (
	upgradeNS     = "lab1"
	upgradePool   = "capl-pool"
	upgradeVolume = "node.qcow2"
)

// TestMgmtUpgradeLibvirtProviderOnTheBox is issue 22's 'mgmt upgrade on
// the box': labctl's own libvirt provider moves from one labctl build to
// another through the REAL cluster-api-operator, with a Cluster whose
// Machine runs on it.
//
// The stack goes in as 'mgmt install' puts it (the real charts, operator
// and providers of TestInstallOnTheBoxThroughTheRealOperator) from a
// labctl at v0.9.0; the runner runs the provider's Deployment as labctl
// built at v0.9.0, and, once the operator names the image v0.9.1, as
// labctl built at v0.9.1: the tag picks the binary, as a node pulls it.
// Each release's components and metadata.yaml reach the operator as
// labctl hands them over, the offline ConfigMap of the binary's own.
//
// The Machine: a MachineDeployment of one on a LibvirtCluster whose host
// is the test's libvirtd (libvirt's test driver over TLS on loopback).
// That driver has no volume streams, so the provider process could not
// upload the machine's seed; the domain is made by the provider's own
// code in this process (controller.Run, the upload discarded, as the
// provider's tests run it) before the stack's provider is installed,
// which then takes the machine over as its own.
func TestMgmtUpgradeLibvirtProviderOnTheBox(t *testing.T) {
	began := time.Now()
	b, _, lab, dir := realBox(t)
	d := libvirttest.StartPrivate(t)
	nodeimage.Place(t, d, "kvm1", upgradePool, upgradeVolume)
	pins := versions.MustGet()
	built := time.Now()
	oldBin, newBin := testbed.LabctlAt(t, libvirtFrom), testbed.LabctlAt(t, libvirtTo)
	t.Logf("two labctl builds in %s", time.Since(built).Round(time.Millisecond))
	b.Runner.Run(runner.LabctlAt(oldBin, pins, libvirtFrom))
	b.Runner.Run(runner.LabctlAt(newBin, pins, libvirtTo))
	// This process is the labctl that installs, then the one that
	// upgrades: its version names the provider it installs.
	was := versions.Version
	t.Cleanup(func() { versions.Version = was })
	versions.Version = libvirtFrom
	offline := func(o *mgmt.InstallOptions) { o.OfflineDir, o.Charts, o.Timeout = dir, mgmt.HelmSDK, 4*time.Minute }

	// The upstream stack first, then the Cluster, then labctl's
	// provider (the seed upload above).
	if o, err := install(t, bedFor(b.Env), lab, offline); err != nil {
		t.Fatalf("mgmt install of the upstream stack: %v\n%s", err, o.stderr.String())
	}
	c := provisionLibvirtMachine(t, b, d, pins)
	dom := rawLibvirt(t, d)
	before := snapshotFleet(t, c, dom)
	t.Logf("the Machine is provisioned (%.0fs in): %v", time.Since(began).Seconds(), before)

	lab.Management.Stack.Libvirt.Enabled = true
	o, err := install(t, bedFor(b.Env), lab, offline)
	if err != nil {
		t.Fatalf("mgmt install at %s: %v\n%s", libvirtFrom, err, o.stderr.String())
	}
	checkStepsOf(t, append(slices.Clone(wantSteps[:7]), "InfrastructureProvider libvirt "+libvirtFrom, wantSteps[7]), o.stderr.String(), "")
	checkLibvirtProviderRuns(t, b, oldBin, libvirtFrom)
	old := providerProc(t, b, oldBin, libvirtFrom)
	oldHolder := leaseHolder(t, b, "")
	settled(t, old)
	// The installed provider took the machine over: nothing was made
	// again, and the domain was not restarted.
	checkSameFleet(t, "after the install at "+libvirtFrom, before, snapshotFleet(t, c, dom))

	versions.Version = libvirtTo
	upgradeOpts := func(u *mgmt.UpgradeOptions) {
		u.OfflineDir, u.Charts, u.Timeout = dir, mgmt.HelmSDK, 4*time.Minute
	}
	stepsTo := append(slices.Clone(wantSteps[:7]), "InfrastructureProvider libvirt "+libvirtTo, wantSteps[7])

	// mgmt install of the new labctl does not move the provider: that is
	// the upgrade's job, and it says so before writing anything.
	refused := bedFor(b.Env)
	o, err = install(t, refused, lab, offline)
	if err == nil || !strings.Contains(err.Error(), "InfrastructureProvider libvirt "+libvirtFrom+" → "+libvirtTo) || !strings.Contains(err.Error(), "'labctl mgmt upgrade") {
		t.Errorf("mgmt install at %s over the provider at %s: %v, want a refusal naming the move and mgmt upgrade\n%s", libvirtTo, libvirtFrom, err, o.stderr.String())
	}
	if n := refused.writes.Load(); n != 0 {
		t.Errorf("the refused mgmt install made %d write requests; want 0", n)
	}

	// The dry run: the plan names the provider's from and to, and
	// nothing is written (counted on the wire, so a write by any path of
	// labctl's shows).
	dry := bedFor(b.Env)
	o, p, err := upgrade(t, dry, lab, ctx(t), func(u *mgmt.UpgradeOptions) { upgradeOpts(u); u.DryRun = true })
	if err != nil {
		t.Fatalf("mgmt upgrade --dry-run: %v\n%s", err, o.stderr.String())
	}
	plan := o.stderr.String()
	t.Logf("the plan:\n%s", plan)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^InfrastructureProvider libvirt\s+v0\.9\.0\s+v0\.9\.1\s+upgrade$`),
		regexp.MustCompile(`(?m)^  InfrastructureProvider libvirt v0\.9\.0 → v0\.9\.1: sets the operator's InfrastructureProvider ` + release.Namespace + `/libvirt spec\.version;.*no Machine is replaced\.$`),
		// The rest of the stack runs its pins: only the provider moves.
		regexp.MustCompile(`(?m)^CoreProvider cluster-api\s+(\S+)\s+(\S+)\s+up to date$`),
		regexp.MustCompile(`(?m)^InfrastructureProvider proxmox\s+v0\.9\.0\s+v0\.9\.0\s+up to date$`),
	} {
		if !want.MatchString(plan) {
			t.Errorf("the plan lacks %s:\n%s", want, plan)
		}
	}
	if n := countUpgrades(p); n != 1 {
		t.Errorf("the plan upgrades %d components, want the libvirt provider alone: %+v", n, p.Items)
	}
	if n := dry.writes.Load(); n != 0 {
		t.Errorf("mgmt upgrade --dry-run made %d write requests; want 0", n)
	}
	if v := str(get(t, dry, provider("InfrastructureProvider"), release.Namespace, "libvirt"), "spec", "version"); v != libvirtFrom {
		t.Errorf("after the dry run the provider's spec.version is %s, want %s", v, libvirtFrom)
	}

	// The upgrade, through the real operator.
	up := bedFor(b.Env)
	upBegan := time.Now()
	o, p, err = upgrade(t, up, lab, ctx(t), func(u *mgmt.UpgradeOptions) { upgradeOpts(u); u.Yes = true })
	if err != nil {
		t.Fatalf("mgmt upgrade: %v\n%s", err, o.stderr.String())
	}
	t.Logf("mgmt upgrade of the libvirt provider: %s, %d writes\n%s", time.Since(upBegan).Round(time.Millisecond), up.writes.Load(), o.stderr.String())
	if it := item(p, "InfrastructureProvider libvirt"); it.From != libvirtFrom || it.To != libvirtTo || it.Action != mgmt.ActionUpgrade {
		t.Errorf("the upgrade's plan for the libvirt provider: %+v", it)
	}
	// The operator says it installed the new release, and runs its image.
	if v := str(get(t, up, provider("InfrastructureProvider"), release.Namespace, "libvirt"), "status", "installedVersion"); v != libvirtTo {
		t.Errorf("the operator's InfrastructureProvider libvirt has installedVersion %q, want %s", v, libvirtTo)
	}
	checkLibvirtProviderRuns(t, b, newBin, libvirtTo)
	// The process that runs now is the new build, and the old one is gone.
	now := providerProc(t, b, newBin, libvirtTo)
	if now.Pid() == old.Pid() || old.Running() {
		t.Errorf("the v0.9.0 provider (pid %d) still runs beside the new one (pid %d)", old.Pid(), now.Pid())
	}
	leaseHolder(t, b, oldHolder)
	settled(t, now)
	checkSameFleet(t, "after the upgrade to "+libvirtTo, before, snapshotFleet(t, c, dom))

	// A re-run: every component at its pin, nothing written.
	again := bedFor(b.Env)
	o, p, err = upgrade(t, again, lab, ctx(t), func(u *mgmt.UpgradeOptions) { upgradeOpts(u); u.Yes = true })
	if err != nil || p.Changes() || !strings.Contains(o.stderr.String(), "nothing to do") {
		t.Errorf("the re-run of mgmt upgrade: %v\n%s", err, o.stderr.String())
	}
	if it := item(p, "InfrastructureProvider libvirt"); it.From != libvirtTo || it.Action != mgmt.ActionNone {
		t.Errorf("the re-run's plan for the libvirt provider: %+v", it)
	}
	if n := again.writes.Load(); n != 0 {
		t.Errorf("the re-run of mgmt upgrade made %d write requests; want 0:\n%s", n, o.stderr.String())
	}
	// And mgmt install of the new labctl finds its stack as it left it.
	checkNoOpRerun(t, b, lab, dir, stepsTo)
	t.Logf("the whole test: %.0fs", time.Since(began).Seconds())
}

func countUpgrades(p *mgmt.UpgradePlan) int {
	n := 0
	for _, it := range p.Items {
		if it.Action == mgmt.ActionUpgrade {
			n++
		}
	}
	return n
}

// providerProc is the process the runner runs for the libvirt provider's
// Deployment, which must be bin; the binary it runs from reports version
// (its build info's linker flags: the file the running process was
// started from, not the Deployment's image string).
func providerProc(t *testing.T, b *box.Box, bin, version string) *runner.Proc {
	t.Helper()
	p := b.Runner.Proc(release.Namespace, libvirtDeployment)
	if p == nil || !p.Running() {
		t.Fatalf("the runner runs no process for the libvirt provider's Deployment (runner: %v)", b.Runner.Procs())
	}
	if p.Image.Binary != bin {
		t.Fatalf("the libvirt provider runs %s, want the build at %s (%s)", p.Image.Binary, version, bin)
	}
	exe := "/proc/" + strconv.Itoa(p.Pid()) + "/exe"
	info, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatalf("reading the build info of the running provider (%s): %v", exe, err)
	}
	var ldflags string
	for _, s := range info.Settings {
		if s.Key == "-ldflags" {
			ldflags = s.Value
		}
	}
	if !strings.Contains(ldflags, "/internal/versions.Version="+version) {
		t.Fatalf("the running provider (pid %d) was built with -ldflags %q, not labctl's version %s", p.Pid(), ldflags, version)
	}
	return p
}

// leaseHolder waits until the provider's leader Lease has a holder other
// than not (a new manager took it) and returns it.
func leaseHolder(t *testing.T, b *box.Box, not string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(b.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		l, err := cs.CoordinationV1().Leases(release.Namespace).Get(ctx(t), "libvirt-provider.infrastructure.labctl.dev", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			last = *l.Spec.HolderIdentity
			if last != "" && last != not {
				return last
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("the libvirt provider's Lease is held by %q after 2 minutes, want a holder other than %q", last, not)
	return ""
}

// settled waits until the provider's LibvirtMachine controller started
// its workers, which then reconcile every LibvirtMachine the cache lists,
// and gives those reconciles time to act (each is one round to the
// host): what it would change about the machine is done by then.
func settled(t *testing.T, p *runner.Proc) {
	t.Helper()
	started := regexp.MustCompile(`"msg":"Starting workers".*"controller":"libvirtmachine"`)
	deadline := time.Now().Add(time.Minute)
	for !started.MatchString(ownLog(t, p)) {
		if time.Now().After(deadline) {
			t.Fatalf("the provider's LibvirtMachine controller did not start within a minute; its log:\n%s", runner.Tail(p.Log, 30))
		}
		time.Sleep(time.Second)
	}
	time.Sleep(10 * time.Second)
}

// ownLog is what p's process wrote: the runner appends every start of a
// Deployment's container to one log, after a line naming the binary, so
// the old release's lines come before the new one's.
func ownLog(t *testing.T, p *runner.Proc) string {
	t.Helper()
	data, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatalf("reading the provider's log: %v", err)
	}
	marker := "--- runner: starting " + p.Image.Binary + " "
	i := strings.LastIndex(string(data), marker)
	if i < 0 {
		return ""
	}
	return string(data[i:])
}

// fleet is what a replaced machine would change: the Machines and
// LibvirtMachines by name, UID and providerID, and every domain of the
// host by name, UUID and runtime id (a domain destroyed and started
// again gets another id).
type fleet struct{ machines, libvirtMachines, domains []string }

func (f fleet) String() string {
	return fmt.Sprintf("Machines %v, LibvirtMachines %v, domains %v", f.machines, f.libvirtMachines, f.domains)
}

func snapshotFleet(t *testing.T, c client.Client, l *lv.Libvirt) fleet {
	t.Helper()
	var f fleet
	var ms clusterv1.MachineList
	if err := c.List(ctx(t), &ms, client.InNamespace(upgradeNS)); err != nil {
		t.Fatalf("listing the Machines: %v", err)
	}
	for _, m := range ms.Items {
		f.machines = append(f.machines, fmt.Sprintf("%s uid=%s providerID=%s", m.Name, m.UID, m.Spec.ProviderID))
	}
	var lms v1alpha1.LibvirtMachineList
	if err := c.List(ctx(t), &lms, client.InNamespace(upgradeNS)); err != nil {
		t.Fatalf("listing the LibvirtMachines: %v", err)
	}
	for _, m := range lms.Items {
		f.libvirtMachines = append(f.libvirtMachines, fmt.Sprintf("%s uid=%s providerID=%s", m.Name, m.UID, m.Spec.ProviderID))
	}
	doms, _, err := l.ConnectListAllDomains(1, 0)
	if err != nil {
		t.Fatalf("listing the host's domains: %v", err)
	}
	for _, d := range doms {
		f.domains = append(f.domains, fmt.Sprintf("%s uuid=%x id=%d", d.Name, d.UUID, d.ID))
	}
	slices.Sort(f.machines)
	slices.Sort(f.libvirtMachines)
	slices.Sort(f.domains)
	return f
}

// checkSameFleet: no Machine was replaced or deleted, and no domain made,
// deleted or restarted.
func checkSameFleet(t *testing.T, when string, before, after fleet) {
	t.Helper()
	if !slices.Equal(before.machines, after.machines) || !slices.Equal(before.libvirtMachines, after.libvirtMachines) || !slices.Equal(before.domains, after.domains) {
		t.Errorf("%s the Cluster was disturbed:\nbefore: %v\nafter:  %v", when, before, after)
	}
}

// rawLibvirt reaches the test libvirtd past labctl's driver, whose VM
// list has no runtime ids.
func rawLibvirt(t *testing.T, d *libvirttest.Daemon) *lv.Libvirt {
	t.Helper()
	conn, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatalf("dialling the test libvirtd: %v", err)
	}
	l := lv.NewWithDialer(dialers.NewAlreadyConnected(conn))
	if err := l.ConnectToURI("test:///default"); err != nil {
		t.Fatalf("connecting to the test libvirtd: %v", err)
	}
	t.Cleanup(func() { _ = l.Disconnect() })
	return l
}

// provisionLibvirtMachine makes lab1 in the shape of the provider's own
// tests (an in-cluster IP pool, a LibvirtCluster on the test libvirtd
// over TLS, the Cluster, a MachineDeployment of one on a
// LibvirtMachineTemplate with cloud-config bootstrap data) and runs the
// provider in this process until its Machine is provisioned, then stops
// it. The provider's CRDs go in first from the release components, as
// the operator puts them; its install later finds them as they are.
func provisionLibvirtMachine(t *testing.T, b *box.Box, d *libvirttest.Daemon, pins versions.Pins) client.Client {
	t.Helper()
	sch, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(b.Env.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := release.Components(release.Image(pins.LibvirtProvider, libvirtFrom), pins.LibvirtProvider.Platforms)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kube.ParseObjects("the libvirt provider's components", raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		testbed.LabelAsTheOperator(u)
		if err := c.Create(ctx(t), u); err != nil {
			t.Fatalf("creating the libvirt provider's CRD %s: %v", u.GetName(), err)
		}
	}
	waitFor(t, "the libvirt provider's CRDs served", time.Minute, func() (bool, string) {
		err := c.List(ctx(t), &v1alpha1.LibvirtMachineList{})
		return err == nil, fmt.Sprint(err)
	})

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) []byte {
		data, err := os.ReadFile(p)
		must(err)
		return data
	}
	must(c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: upgradeNS}}))
	must(c.Create(ctx(t), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: upgradeNS, Name: "kvm1-credentials"},
		Data:       map[string][]byte{v1alpha1.KeyCA: read(d.CAFile), v1alpha1.KeyTLSCert: read(d.CertFile), v1alpha1.KeyTLSKey: read(d.KeyFile)},
	}))
	must(c.Create(ctx(t), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
		"metadata": map[string]any{"namespace": upgradeNS, "name": "nodes"},
		"spec":     map[string]any{"addresses": []any{"10.213.0.50"}, "prefix": int64(24), "gateway": "10.213.0.1"},
	}}))
	must(c.Create(ctx(t), &v1alpha1.LibvirtCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: upgradeNS, Name: "lab1"},
		Spec: v1alpha1.LibvirtClusterSpec{
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "127.0.0.1", Port: 6443},
			Hosts: []v1alpha1.LibvirtHost{{Name: "kvm1", URI: "test+tls://127.0.0.1:" + d.TLSPort + "/default",
				CredentialsRef: v1alpha1.SecretReference{Name: "kvm1-credentials"}}},
			Network: v1alpha1.NetworkSpec{Network: "default", DNSServers: []string{"10.213.0.1"}},
			IPPool:  v1alpha1.IPPoolReference{Kind: "InClusterIPPool", Name: "nodes"},
			// The test driver's host is small, and runs its own 8 GiB
			// domain "test"; as in the provider's tests.
			MemoryAdjustment: 1000,
		},
	}))
	must(c.Create(ctx(t), &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: upgradeNS, Name: "lab1"},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: v1alpha1.GroupVersion.Group, Kind: "LibvirtCluster", Name: "lab1"},
		},
	}))
	// In-cluster IPAM v1.0.3 cannot decode a Cluster once it has
	// status.failureDomains and then skips its claims (docs/testing.md):
	// a claim bound before the provider reports them puts the Cluster in
	// IPAM's cache.
	probe := &ipamv1.IPAddressClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: upgradeNS, Name: "ipam-probe", Labels: map[string]string{clusterv1.ClusterNameLabel: "lab1"}},
		Spec: ipamv1.IPAddressClaimSpec{
			ClusterName: "lab1",
			PoolRef:     ipamv1.IPPoolReference{APIGroup: ipamv1.GroupVersion.Group, Kind: "InClusterIPPool", Name: "nodes"},
		},
	}
	must(c.Create(ctx(t), probe))
	waitFor(t, "IPAM binding a claim of lab1", 2*time.Minute, func() (bool, string) {
		if err := c.Get(ctx(t), client.ObjectKeyFromObject(probe), probe); err != nil {
			return false, err.Error()
		}
		return probe.Status.AddressRef.Name != "", fmt.Sprint(probe.Status.Conditions)
	})
	must(c.Delete(ctx(t), probe))
	waitFor(t, "the probe's address released", time.Minute, func() (bool, string) {
		var ips ipamv1.IPAddressList
		err := c.List(ctx(t), &ips, client.InNamespace(upgradeNS))
		return err == nil && len(ips.Items) == 0, fmt.Sprint(len(ips.Items), err)
	})
	must(c.Create(ctx(t), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: upgradeNS, Name: "worker-bootstrap"},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#cloud-config\n"), "format": []byte("cloud-config")},
	}))
	must(c.Create(ctx(t), &v1alpha1.LibvirtMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: upgradeNS, Name: "worker"},
		Spec: v1alpha1.LibvirtMachineTemplateSpec{Template: v1alpha1.LibvirtMachineTemplateResource{
			Spec: v1alpha1.LibvirtMachineSpec{CPUs: 2, MemoryMiB: 512, DiskGiB: 2,
				Image: v1alpha1.ImageVolume{Pool: upgradePool, Volume: upgradeVolume}},
		}},
	}))
	labels := map[string]string{"pool": "worker"}
	must(c.Create(ctx(t), &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: upgradeNS, Name: "worker"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: "lab1",
			Replicas:    ptr.To(int32(1)),
			Selector:    metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{
					ClusterName: "lab1",
					Version:     "v1.35.4",
					Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("worker-bootstrap")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: v1alpha1.GroupVersion.Group, Kind: "LibvirtMachineTemplate", Name: "worker",
					},
				},
			},
		},
	}))

	log := &testbed.LogBuffer{}
	pctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(pctx, controller.Options{Kubeconfig: b.Env.Kubeconfig, HealthAddr: "127.0.0.1:0", Log: log,
			Tune: func(r *controller.Reconcilers) {
				r.Machine.Retry, r.Cluster.Recheck = 2*time.Second, 5*time.Second
				discard := func(_ string, o *libvirt.Options) {
					o.Upload = func(_ context.Context, _ string, rd io.Reader, _ int64) error {
						_, err := io.Copy(io.Discard, rd)
						return err
					}
				}
				r.Machine.Hosts.Options, r.Cluster.Hosts.Options = discard, discard
			}})
	}()
	stopped := false
	end := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		if err := <-done; err != nil {
			t.Errorf("the in-process libvirt provider ended with %v", err)
		}
	}
	defer end()
	waitFor(t, "lab1's LibvirtMachine provisioned", 3*time.Minute, func() (bool, string) {
		var lms v1alpha1.LibvirtMachineList
		if err := c.List(ctx(t), &lms, client.InNamespace(upgradeNS)); err != nil {
			return false, err.Error()
		}
		var states []string
		for _, lm := range lms.Items {
			if ptr.Deref(lm.Status.Initialization.Provisioned, false) && lm.Spec.ProviderID != "" {
				return len(lms.Items) == 1, ""
			}
			states = append(states, lm.Name+": "+fmt.Sprint(lm.Status.Conditions))
		}
		return false, strings.Join(states, "; ") + "\nprovider log:\n" + runner.TailLines(log.String(), 15)
	})
	// The Machine has the providerID too: Cluster API saw the machine.
	waitFor(t, "lab1's Machine with the providerID", time.Minute, func() (bool, string) {
		var ms clusterv1.MachineList
		if err := c.List(ctx(t), &ms, client.InNamespace(upgradeNS)); err != nil {
			return false, err.Error()
		}
		return len(ms.Items) == 1 && ms.Items[0].Spec.ProviderID != "", fmt.Sprint(ms.Items)
	})
	end()
	return c
}

// waitFor polls ok every second until it holds, failing the test with
// its last word after within.
func waitFor(t *testing.T, what string, within time.Duration, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, why := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, within, why)
		}
		time.Sleep(time.Second)
	}
}
