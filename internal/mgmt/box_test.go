package mgmt_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/datastore"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/pvetest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/pki"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/versions"
)

// 'labctl mgmt install' on the management cluster in a box, with nothing
// played by labctl's tests: the REAL cert-manager and cluster-api-operator
// charts through the Helm SDK (from the offline folder, packaged from
// their modules), the REAL operator (run by the runner) turning labctl's
// Provider CRs into the REAL providers from the offline ConfigMaps, and
// the runner starting their managers. Only cert-manager's work is a
// stand-in (package certmanager), and CAPMOX's Proxmox is the fake PVE on
// loopback. 'mgmt status' then reports what the operator says, and a
// second run makes no write while the controllers keep working.
// realBox is the box with the owner's lab aimed at a fake PVE, and the
// offline folder of the real charts and providers.
func realBox(t testing.TB) (*box.Box, *pvetest.Server, *config.Lab, string) {
	t.Helper()
	box.Require(t, "cluster-api-operator", "cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane", "capmox", "ipam-in-cluster")
	b := box.Start(t, box.Bare())
	// CAPMOX asks its Proxmox for /version when it starts: the fake PVE
	// answers, on loopback, with a certificate of the test CA the lab's
	// tls.caFile holds (the file examples/lab.yaml names, under the
	// test's HOME), so CAPMOX gets an answer only when it verifies with
	// the CA labctl gave it.
	lab := ownerLab(t, "http://127.0.0.1:1/no-repository-needed-offline")
	ca := testbed.ExampleHome(t)
	pair, err := ca.Serving(nil, []net.IP{pki.Loopback})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	pve := pvetest.New(t, pvetest.WithCertificate(cert))
	for i := range lab.Hypervisors {
		if px := lab.Hypervisors[i].Proxmox; px != nil {
			px.URL, px.TokenID = pve.URL, pve.TokenID
		}
	}
	t.Setenv("PVE_TOKEN_SECRET", pve.Secret)
	return b, pve, lab, standin.UpstreamOffline(t)
}

// With management.stack.libvirt.enabled, labctl's own libvirt provider
// goes in the same way: the real operator installs it from the ConfigMap
// of the components the binary carries, and the runner runs its
// Deployment's image (labctl's) as labctl built from this checkout,
// 'labctl provider libvirt' with the Deployment's args.
func TestInstallOnTheBoxThroughTheRealOperator(t *testing.T) {
	b, pve, lab, dir := realBox(t)
	lab.Management.Stack.Libvirt.Enabled = true
	labctl := testbed.Labctl(t)
	b.Runner.Run(runner.Labctl(labctl, versions.MustGet()))

	first := bedFor(b.Env)
	began := time.Now()
	o, err := install(t, first, lab, func(o *mgmt.InstallOptions) {
		o.OfflineDir, o.Charts, o.Timeout = dir, mgmt.HelmSDK, 4*time.Minute
	})
	took := time.Since(began)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, o.stderr.String())
	}
	checkStepsOf(t, withLibvirt, o.stderr.String(), "")
	t.Logf("mgmt install until every provider is Ready: %s, %d writes", took.Round(time.Millisecond), first.writes.Load())
	for _, p := range []string{"capi-operator-system/capi-operator-cluster-api-operator", "capi-system/capi-controller-manager",
		"capi-kubeadm-bootstrap-system/capi-kubeadm-bootstrap-controller-manager", "capi-kubeadm-control-plane-system/capi-kubeadm-control-plane-controller-manager",
		"capmox-system/capmox-controller-manager", "capi-ipam-in-cluster-system/capi-ipam-in-cluster-controller-manager",
		release.Namespace + "/" + libvirtDeployment} {
		ns, name, _ := strings.Cut(p, "/")
		if pr := b.Runner.Proc(ns, name); pr == nil || !pr.Running() {
			t.Errorf("no real manager runs for Deployment %s (runner: %v)", p, b.Runner.Procs())
		}
	}

	// The real CAPMOX got labctl's configSecret through the operator's
	// variable substitution: it asked the fake PVE for its version with
	// the token, and was answered.
	var asked bool
	for _, r := range pve.Requests() {
		if r.Method == "GET" && r.Path == "/version" && r.Status == 200 {
			asked = true
		}
	}
	if !asked {
		t.Errorf("CAPMOX never asked the fake PVE GET /version with labctl's token (requests: %v)", pve.Requests())
	}
	// ... over TLS it verified: the operator made CAPMOX's Deployment
	// with verification on and the lab's CA mounted where the flag says.
	checkCAPMOXVerifies(t, b)
	checkLibvirtProviderRuns(t, b, labctl, release.DevVersion)

	t.Run("status", func(t *testing.T) {
		var so out
		r, err := mgmt.Status(ctx(t), mgmt.StatusOptions{IO: so.io(), Lab: lab, Mgmt: static(bedFor(b.Env).client), Output: "json"})
		if err != nil {
			t.Fatalf("status: %v\n%s", err, so.stdout.String())
		}
		var got mgmt.Report
		if err := json.Unmarshal(so.stdout.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if !r.Ready || len(got.Components) != len(withLibvirt) {
			t.Fatalf("status = %+v", got)
		}
		for i, c := range got.Components {
			if !c.Ready || c.Installed != c.Wanted || !strings.HasPrefix(withLibvirt[i], c.Name+" ") {
				t.Errorf("component %d = %+v", i, c)
			}
		}
		// The table a user reads: the libvirt provider's row, wanted and
		// installed at labctl's version, ready.
		var table out
		if _, err := mgmt.Status(ctx(t), mgmt.StatusOptions{IO: table.io(), Lab: lab, Mgmt: static(bedFor(b.Env).client)}); err != nil {
			t.Fatalf("status: %v\n%s", err, table.stdout.String())
		}
		row := regexp.MustCompile(`(?m)^InfrastructureProvider libvirt +` + regexp.QuoteMeta(release.DevVersion) + ` +` + regexp.QuoteMeta(release.DevVersion) + ` +yes *$`)
		if !row.MatchString(table.stdout.String()) {
			t.Errorf("mgmt status has no ready row for the libvirt provider at %s:\n%s", release.DevVersion, table.stdout.String())
		}
	})

	t.Run("no-op re-run", func(t *testing.T) { checkNoOpRerun(t, b, lab, dir, withLibvirt) })
}

// checkNoOpRerun: a second 'mgmt install', while the real controllers
// keep reconciling, finds every component up to date and writes nothing.
func checkNoOpRerun(t *testing.T, b *box.Box, lab *config.Lab, dir string, want []string) {
	t.Helper()
	time.Sleep(5 * time.Second)
	again := bedFor(b.Env)
	o, err := install(t, again, lab, func(o *mgmt.InstallOptions) { o.OfflineDir, o.Charts = dir, mgmt.HelmSDK })
	if err != nil {
		t.Fatalf("re-run: %v\n%s", err, o.stderr.String())
	}
	if n := again.writes.Load(); n != 0 {
		t.Errorf("the re-run made %d write requests; want 0:\n%s", n, o.stderr.String())
	}
	checkStepsOf(t, want, o.stderr.String(), "up to date")
}

// libvirtDeployment is the libvirt provider's Deployment
// (embedded/provider/libvirt/manager.yaml).
const libvirtDeployment = "capl-controller-manager"

// checkLibvirtProviderRuns: the real operator made the libvirt provider's
// CRDs (served: each kind lists) and its Deployment with labctl's image at
// version (versions.yaml's repository), which the runner runs as the
// labctl binary given, built from the checkout, with the Deployment's
// args; the provider, leader-elected on its Lease, runs its reconcilers.
func checkLibvirtProviderRuns(t *testing.T, b *box.Box, labctl, version string) {
	t.Helper()
	kc := bedFor(b.Env).client
	for _, kind := range []string{"LibvirtCluster", "LibvirtMachine", "LibvirtMachineTemplate"} {
		gvk := v1alpha1.GroupVersion.WithKind(kind)
		if served, err := kc.Serves(gvk); err != nil || !served {
			t.Errorf("%s is not served (%v)", gvk, err)
			continue
		}
		if _, err := kc.List(ctx(t), gvk, "", ""); err != nil {
			t.Errorf("listing %s: %v", kind, err)
		}
	}
	cs, err := kubernetes.NewForConfig(b.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cs.AppsV1().Deployments(release.Namespace).Get(ctx(t), libvirtDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the operator made no libvirt provider Deployment: %v", err)
	}
	want := release.Image(versions.MustGet().LibvirtProvider, version)
	if img := d.Spec.Template.Spec.Containers[0].Image; img != want {
		t.Errorf("the libvirt provider runs image %s, want %s", img, want)
	}
	p := b.Runner.Proc(release.Namespace, libvirtDeployment)
	if p == nil || !p.Running() {
		t.Fatalf("the runner runs no process for the libvirt provider's Deployment")
	}
	if p.Image.Binary != labctl || len(p.Args) < 2 || p.Args[0] != "provider" || p.Args[1] != "libvirt" {
		t.Errorf("the libvirt provider's process is %s %v, want %s provider libvirt ...", p.Image.Binary, p.Args, labctl)
	}
	// Leader election is the provider's manager's (a Lease in the
	// namespace its Deployment names): a holder means it got past its
	// cache and started reconciling.
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := cs.CoordinationV1().Leases(release.Namespace).Get(ctx(t), "libvirt-provider.infrastructure.labctl.dev", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the libvirt provider holds no Lease in %s (%v); its log:\n%s", release.Namespace, err, runner.Tail(p.Log, 30))
		}
		time.Sleep(time.Second)
	}
}

// checkCAPMOXVerifies reads the CAPMOX Deployment the real operator made
// from labctl's Provider CR: --proxmox-insecure=false (CAPMOX v0.9.0
// defaults to true) and --proxmox-root-cert-file naming a file of the
// ConfigMap with the lab's CA, mounted in the manager container.
func checkCAPMOXVerifies(t *testing.T, b *box.Box) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(b.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cs.AppsV1().Deployments("capmox-system").Get(ctx(t), components.CAPMOXDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading CAPMOX's Deployment: %v", err)
	}
	want, err := os.ReadFile(filepath.Join(os.Getenv("HOME"), testbed.ExampleCAFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "manager" {
			continue
		}
		var file string
		insecure := "true (CAPMOX's default)"
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--proxmox-root-cert-file="); ok {
				file = v
			}
			if v, ok := strings.CutPrefix(a, "--proxmox-insecure="); ok {
				insecure = v
			}
		}
		if insecure != "false" || file == "" {
			t.Fatalf("CAPMOX's manager runs with --proxmox-insecure=%s and --proxmox-root-cert-file=%q: %v", insecure, file, c.Args)
		}
		for _, m := range c.VolumeMounts {
			if path.Clean(m.MountPath) != path.Dir(file) {
				continue
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name != m.Name || v.ConfigMap == nil {
					continue
				}
				cm, err := cs.CoreV1().ConfigMaps(d.Namespace).Get(ctx(t), v.ConfigMap.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("reading ConfigMap %s: %v", v.ConfigMap.Name, err)
				}
				if cm.Data[path.Base(file)] != string(want) {
					t.Errorf("ConfigMap %s key %s does not hold the lab's caFile", cm.Name, path.Base(file))
				}
				return
			}
		}
		t.Fatalf("nothing is mounted at %s in CAPMOX's manager: %v %v", path.Dir(file), c.VolumeMounts, d.Spec.Template.Spec.Volumes)
	}
	t.Fatal("CAPMOX's Deployment has no manager container")
}

// With Kamaji enabled, its part of the stack goes in as on the owner's
// VM: the REAL Kamaji (the chart labctl carries) and the REAL kamaji-etcd
// chart (from the offline folder, packaged from its source) through the
// Helm SDK, hooks included, and the REAL Kamaji provider through the real
// operator. The real StatefulSet controller makes the datastore's Pod,
// which the runner runs as the test bed's etcd on a folder kept per
// claim (local-path's), and whose certificates the cert-manager stand-in
// issues from the chart's ECDSA CA; package kamajietcd plays the chart's
// setup Job (root user, auth on), which Helm waits for. A re-run writes
// nothing.
func TestInstallKamajiOnTheBox(t *testing.T) {
	box.Require(t, "kamaji", "kamaji-provider")
	b, _, lab, dir := realBox(t)
	lab.Management.Stack.Kamaji.Enabled = true
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"}
	want := append(slices.Clone(wantSteps[:7]), append(kamajiSteps(), wantSteps[7])...)

	first := bedFor(b.Env)
	began := time.Now()
	o, err := install(t, first, lab, func(o *mgmt.InstallOptions) {
		o.OfflineDir, o.Charts, o.Timeout = dir, mgmt.HelmSDK, 4*time.Minute
	})
	if err != nil {
		t.Fatalf("install: %v\n%s", err, o.stderr.String())
	}
	checkStepsOf(t, want, o.stderr.String(), "")
	t.Logf("mgmt install with Kamaji until every part is Ready: %s", time.Since(began).Round(time.Millisecond))

	for _, p := range []string{"kamaji-system/kamaji", "kamaji-system/capi-kamaji-controller-manager"} {
		ns, name, _ := strings.Cut(p, "/")
		if pr := b.Runner.Proc(ns, name); pr == nil || !pr.Running() {
			t.Errorf("no real manager runs for Deployment %s (runner: %v)", p, b.Runner.Procs())
		}
	}
	// The datastore: the chart's etcd, as the StatefulSet's Pod
	// kamaji-etcd-0, named by the downward API, its data in the claim's
	// folder, serving TLS with client certificates.
	etcd := b.Runner.Proc(components.KamajiNamespace, components.KamajiEtcdRelease+"-0")
	if etcd == nil || !etcd.Running() {
		t.Fatalf("no etcd runs for the kamaji-etcd StatefulSet's Pod (runner: %v)", b.Runner.Procs())
	}
	args := strings.Join(etcd.Args, " ")
	for _, want := range []string{"--name=kamaji-etcd-0", "--client-cert-auth=true", "--listen-client-urls=https://127.0.0.1:2379"} {
		if !strings.Contains(args, want) {
			t.Errorf("etcd runs without %s: %s", want, args)
		}
	}
	if strings.Contains(args, "--data-dir=/var/run/etcd") {
		t.Errorf("etcd's data is not on the claim's folder: %s", args)
	}
	cs, err := kubernetes.NewForConfig(b.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sts, err := cs.AppsV1().StatefulSets(components.KamajiNamespace).Get(ctx(t), components.KamajiEtcdRelease, metav1.GetOptions{})
	if err != nil {
		t.Errorf("the kamaji-etcd StatefulSet: %v", err)
	} else if sts.Status.ReadyReplicas != 1 {
		t.Errorf("the StatefulSet controller counts %d ready replicas of kamaji-etcd, want 1", sts.Status.ReadyReplicas)
	}
	// Helm deleted the setup Job once it succeeded (hook-succeeded).
	if _, err := cs.BatchV1().Jobs(components.KamajiNamespace).Get(ctx(t), components.KamajiEtcdRelease+"-etcd-setup-2", metav1.GetOptions{}); err == nil {
		t.Errorf("the kamaji-etcd setup Job is still there: Helm deletes it only when it succeeded")
	}
	checkDatastoreThroughPortForward(t, b, cs)
	checkBackupReachesTheDatastore(t, b)

	t.Run("no-op re-run", func(t *testing.T) { checkNoOpRerun(t, b, lab, dir, want) })
}

// checkBackupReachesTheDatastore: labctl's datastore client, as 'mgmt
// backup' and 'mgmt restore' open the chart's DataStore: its endpoint a
// Pod's name, reached through the API server's port-forward, as the root
// user with auth on (the setup Job's work). A key written under a
// tenant's prefix reads back, and Count sees it.
func checkBackupReachesTheDatastore(t *testing.T, b *box.Box) {
	t.Helper()
	store, err := datastore.Open(ctx(t), bedFor(b.Env).client, components.KamajiDataStore)
	if err != nil {
		t.Fatalf("opening the DataStore %s as a backup does: %v", components.KamajiDataStore, err)
	}
	defer store.Close()
	if !strings.HasSuffix(store.Endpoint, ".svc.cluster.local:2379") {
		t.Errorf("the DataStore was reached at %s, want the chart's Pod name", store.Endpoint)
	}
	prefix := datastore.Prefix("backup-check")
	kvs := []datastore.KV{{Key: []byte(prefix + "a"), Value: []byte("1")}, {Key: []byte(prefix + "b"), Value: []byte("2")}}
	if err := store.Put(ctx(t), kvs); err != nil {
		t.Fatal(err)
	}
	got, rev, err := store.Keys(ctx(t), prefix)
	if err != nil || len(got) != 2 || string(got[1].Value) != "2" || rev == 0 {
		t.Errorf("keys under %s: %v at revision %d (%v), want the two written", prefix, got, rev, err)
	}
	if n, err := store.Count(ctx(t), prefix); err != nil || n != 2 {
		t.Errorf("Count(%s) = %d, %v; want 2", prefix, n, err)
	}
}

// checkDatastoreThroughPortForward reaches the datastore as labctl's
// backups will, client-go's port-forward (SPDY) to the Pod kamaji-etcd-0
// through the box's API server, and as a person would, with kubectl
// port-forward: the API server goes to the Pod's node, the runner's,
// whose kubelet server dials the etcd it runs. Through each, etcd's
// /health over TLS with the chart's CA and its root client certificate,
// under the name the server certificate holds.
func checkDatastoreThroughPortForward(t *testing.T, b *box.Box, cs kubernetes.Interface) {
	t.Helper()
	ns, pod := components.KamajiNamespace, components.KamajiEtcdRelease+"-0"
	p, err := cs.CoreV1().Pods(ns).Get(ctx(t), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Pod %s: %v", pod, err)
	}
	if p.Spec.NodeName != runner.NodeName {
		t.Errorf("the Pod %s is on node %q, want the runner's %q", pod, p.Spec.NodeName, runner.NodeName)
	}
	// The Node is kept as kubelet keeps its own, or the node lifecycle
	// controller would mark it unreachable and evict the Pod.
	if n, err := cs.CoreV1().Nodes().Get(ctx(t), runner.NodeName, metav1.GetOptions{}); err != nil || !nodeReady(n) {
		t.Errorf("the runner's Node is not Ready (%v)", err)
	}
	if l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx(t), runner.NodeName, metav1.GetOptions{}); err != nil ||
		l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != runner.NodeName || l.Spec.RenewTime == nil {
		t.Errorf("the runner's Node has no Lease renewed by its kubelet (%v)", err)
	}
	server, err := cs.CoreV1().Secrets(ns).Get(ctx(t), components.KamajiEtcdRelease+"-server-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the datastore's CA: %v", err)
	}
	client, err := cs.CoreV1().Secrets(ns).Get(ctx(t), components.KamajiEtcdRelease+"-client-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the datastore's root client certificate: %v", err)
	}
	cert, err := tls.X509KeyPair(client.Data["tls.crt"], client.Data["tls.key"])
	if err != nil {
		t.Fatalf("the datastore's root client certificate: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(server.Data["ca.crt"]) {
		t.Fatalf("Secret %s/%s-server-certs holds no CA certificate in ca.crt", ns, components.KamajiEtcdRelease)
	}

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		ServerName: pod + "." + components.KamajiEtcdRelease + "." + ns + ".svc.cluster.local",
	}}}

	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	began := time.Now()
	local, err := runner.Forward(t, b.Env.Config, u, 2379)
	if err != nil {
		t.Fatalf("client-go's port-forward to %s/%s:2379 through the API server: %v", ns, pod, err)
	}
	checkEtcdHealth(t, hc, local, "client-go's port-forward (SPDY)")
	t.Logf("etcd's /health through client-go's port-forward in %s", time.Since(began).Round(time.Millisecond))

	// kubectl asks over WebSocket first, which the API server carries to
	// the node as SPDY.
	began = time.Now()
	cmd := exec.CommandContext(t.Context(), filepath.Join(testbed.Assets(t), "kubectl"), "--kubeconfig", b.Env.Kubeconfig,
		"port-forward", "-n", ns, "pod/"+pod, ":2379")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kubectl port-forward: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// "Forwarding from 127.0.0.1:<port> -> 2379"
	line, _ := bufio.NewReader(out).ReadString('\n')
	m := regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> 2379`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("kubectl port-forward printed %q, want the local port; stderr:\n%s", line, stderr.String())
	}
	local, _ = strconv.Atoi(m[1])
	checkEtcdHealth(t, hc, local, "kubectl port-forward")
	t.Logf("etcd's /health through kubectl port-forward in %s", time.Since(began).Round(time.Millisecond))
}

// checkEtcdHealth asks etcd's /health through the forwarded local port.
func checkEtcdHealth(t *testing.T, hc *http.Client, local int, through string) {
	t.Helper()
	resp, err := hc.Get("https://127.0.0.1:" + strconv.Itoa(local) + "/health")
	if err != nil {
		t.Errorf("etcd's /health through %s: %v", through, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var health struct {
		Health string `json:"health"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &health) != nil || health.Health != "true" {
		t.Errorf("etcd's /health through %s: %s %s, want {\"health\":\"true\"...}", through, resp.Status, body)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
