package mgmt_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// tokenSecret is the Proxmox token secret the tests export. It may only
// ever reach the CAPMOX Secret.
const tokenSecret = "8c0f51e2-3b7d-4a49-9d4e-labctl-test-secret"

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}

// ownerLab is the owner's lab (examples/lab.yaml) with the token secret
// exported, HOME holding the CA file it names (testbed.ExampleHome) and
// the charts pointed at repoURL (the loopback stand-ins).
func ownerLab(t testing.TB, repoURL string) *config.Lab {
	t.Helper()
	testbed.ExampleHome(t)
	t.Setenv("PVE_TOKEN_SECRET", tokenSecret)
	lab, _, err := config.Load(context.Background(), config.Request{Path: "../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.Stack.ChartRepos = config.ChartRepos{CertManager: repoURL, ClusterAPIOperator: repoURL}
	return lab
}

// bed is a test bed with a client whose writes are counted.
type bed struct {
	env    *testbed.Env
	client *kube.Client
	writes *atomic.Int64
}

func newBed(t testing.TB, sets ...string) *bed {
	t.Helper()
	env := testbed.Start(t, testbed.WithCRDs(sets...))
	return bedFor(env)
}

// bedFor gives a fresh counting client for env, as a new labctl run has.
func bedFor(env *testbed.Env) *bed {
	c, n := testbed.CountingClient(env)
	return &bed{env: env, client: c, writes: n}
}

type out struct{ stdout, stderr bytes.Buffer }

func (o *out) io() *ui.IO {
	s, _, _, _ := ui.Test()
	s.Out, s.Err = &o.stdout, &o.stderr
	return s
}

// noSecret fails when the token secret shows in anything a user sees.
func (o *out) noSecret(t testing.TB) {
	t.Helper()
	for _, s := range []string{o.stdout.String(), o.stderr.String()} {
		if strings.Contains(s, tokenSecret) || strings.Contains(s, base64.StdEncoding.EncodeToString([]byte(tokenSecret))) {
			t.Fatalf("the token secret was printed:\nstdout:\n%s\nstderr:\n%s", o.stdout.String(), o.stderr.String())
		}
	}
}

func install(t testing.TB, b *bed, lab *config.Lab, mod func(*mgmt.InstallOptions)) (*out, error) {
	t.Helper()
	var o out
	opts := mgmt.InstallOptions{IO: o.io(), Lab: lab, Mgmt: static(b.client), Verbose: 3, Timeout: time.Minute}
	if mod != nil {
		mod(&opts)
	}
	err := mgmt.Install(ctx(t), opts)
	o.noSecret(t)
	return &o, err
}

const operatorGroup = "operator.cluster.x-k8s.io"

func get(t testing.TB, b *bed, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, found, err := b.client.Get(ctx(t), kube.Ref{GVK: gvk, Namespace: ns, Name: name})
	if err != nil || !found {
		t.Fatalf("%s %s/%s: found %v, %v", gvk.Kind, ns, name, found, err)
	}
	return obj
}

func provider(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: operatorGroup, Version: "v1alpha2", Kind: kind}
}

func str(o *unstructured.Unstructured, path ...string) string {
	s, _, _ := unstructured.NestedString(o.Object, path...)
	return s
}

// checkProviders asserts what a user relies on: each Provider CR at its
// pinned version, CAPMOX pointed at its Secret, and the token secret only
// in that Secret.
func checkProviders(t *testing.T, b *bed) {
	t.Helper()
	for _, p := range []struct{ kind, ns, name, version string }{
		{"CoreProvider", "capi-system", "cluster-api", "v1.12.11"},
		{"BootstrapProvider", "capi-kubeadm-bootstrap-system", "kubeadm", "v1.12.11"},
		{"ControlPlaneProvider", "capi-kubeadm-control-plane-system", "kubeadm", "v1.12.11"},
		{"InfrastructureProvider", "capmox-system", "proxmox", "v0.9.0"},
		{"IPAMProvider", "capi-ipam-in-cluster-system", "in-cluster", "v1.0.3"},
	} {
		obj := get(t, b, provider(p.kind), p.ns, p.name)
		if v := str(obj, "spec", "version"); v != p.version {
			t.Errorf("%s %s: spec.version = %q, want %s", p.kind, p.name, v, p.version)
		}
	}
	capmox := get(t, b, provider("InfrastructureProvider"), "capmox-system", "proxmox")
	if n, ns := str(capmox, "spec", "configSecret", "name"), str(capmox, "spec", "configSecret", "namespace"); n != "proxmox-variables" || ns != "capmox-system" {
		t.Errorf("CAPMOX configSecret = %s/%s, want capmox-system/proxmox-variables", ns, n)
	}
	sec := get(t, b, schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, "capmox-system", "proxmox-variables")
	want := map[string]string{"PROXMOX_URL": "https://192.168.0.8:8006", "PROXMOX_TOKEN": "root@pam!labctl", "PROXMOX_SECRET": tokenSecret}
	data, _, _ := unstructured.NestedStringMap(sec.Object, "data")
	for k, v := range want {
		got, _ := base64.StdEncoding.DecodeString(data[k])
		if string(got) != v {
			t.Errorf("Secret proxmox-variables %s = %q, want %q", k, got, v)
		}
	}
	// No other object holds the secret.
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "ConfigMap"}, provider("InfrastructureProvider"), provider("CoreProvider"),
		{Group: "helm.cattle.io", Version: "v1", Kind: "HelmChart"},
	} {
		items, err := b.client.List(ctx(t), gvk, "", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if raw, _ := json.Marshal(it.Object); bytes.Contains(raw, []byte(tokenSecret)) {
				t.Errorf("%s %s/%s holds the token secret", gvk.Kind, it.GetNamespace(), it.GetName())
			}
		}
	}
}

// checkRBAC asserts the autoscaler RBAC every per-cluster autoscaler uses.
func checkRBAC(t *testing.T, b *bed) {
	t.Helper()
	get(t, b, schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}, "cluster-autoscaler", "cluster-autoscaler")
	role := get(t, b, schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, "", "labctl-cluster-autoscaler-management")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	grants := map[string]string{}
	for _, r := range rules {
		m := r.(map[string]any)
		verbs := []string{}
		for _, v := range m["verbs"].([]any) {
			verbs = append(verbs, v.(string))
		}
		for _, res := range m["resources"].([]any) {
			grants[res.(string)] = strings.Join(verbs, ",")
		}
	}
	for _, res := range []string{"machinedeployments", "machinedeployments/scale", "machinesets", "machines", "machinepools"} {
		if !strings.Contains(grants[res], "update") || !strings.Contains(grants[res], "watch") {
			t.Errorf("autoscaler role on %s: %q, want get/list/watch/update", res, grants[res])
		}
	}
	for _, res := range []string{"proxmoxmachinetemplates", "libvirtmachinetemplates"} {
		if grants[res] != "get,list,watch" {
			t.Errorf("autoscaler role on %s: %q, want get,list,watch (scale from zero)", res, grants[res])
		}
	}
	bind := get(t, b, schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}, "", "labctl-cluster-autoscaler-management")
	subj, _, _ := unstructured.NestedSlice(bind.Object, "subjects")
	if len(subj) != 1 || subj[0].(map[string]any)["namespace"] != "cluster-autoscaler" {
		t.Errorf("binding subjects = %v", subj)
	}
}

// steps returns the final status lines of a run: "✓ name (...)".
func steps(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		// A step's last line ends with its time or detail in brackets; a
		// notice such as the development build's warning does not.
		if !strings.HasSuffix(l, ")") {
			continue
		}
		if strings.HasPrefix(l, ui.SymbolOK+" ") || strings.HasPrefix(l, ui.SymbolFail+" ") || strings.HasPrefix(l, ui.SymbolWarn+" ") {
			out = append(out, l)
		}
	}
	return out
}

var wantSteps = []string{
	"cert-manager v1.21.2", "cluster-api-operator 0.28.0",
	"CoreProvider cluster-api v1.12.11", "BootstrapProvider kubeadm v1.12.11", "ControlPlaneProvider kubeadm v1.12.11",
	"InfrastructureProvider proxmox v0.9.0", "IPAMProvider in-cluster v1.0.3", "cluster-autoscaler RBAC v1.35.0",
}

// withLibvirt is wantSteps with labctl's own libvirt provider
// (management.stack.libvirt.enabled), after the upstream providers, at
// the version of a labctl built without a release version.
var withLibvirt = append(slices.Clone(wantSteps[:7]), "InfrastructureProvider libvirt "+release.DevVersion, wantSteps[7])

// checkSteps asserts each component's line, in install order, ended as
// want ("" for done, or "up to date").
func checkSteps(t *testing.T, stderr, want string) {
	t.Helper()
	checkStepsOf(t, wantSteps, stderr, want)
}

// checkStepsOf is checkSteps for the components wantSteps names.
func checkStepsOf(t *testing.T, wantSteps []string, stderr, want string) {
	t.Helper()
	got := steps(stderr)
	if len(got) != len(wantSteps) {
		t.Fatalf("status lines:\n%s\nwant one per component: %v\nfull stderr:\n%s", strings.Join(got, "\n"), wantSteps, stderr)
	}
	for i, name := range wantSteps {
		prefix := ui.SymbolOK + " " + name + " ("
		if !strings.HasPrefix(got[i], prefix) || (want != "" && got[i] != prefix+want+")") {
			t.Errorf("line %d = %q, want %s...%s", i, got[i], prefix, want)
		}
	}
}

func TestInstallThroughK3sHelmControllerStandIn(t *testing.T) {
	repo := standin.ServeRepo(t)
	b := newBed(t, "capi", "operator", "helm-controller")
	lab := ownerLab(t, repo.URL)
	standin.PlayHelmController(t, b.env.Config)
	standin.PlayDeployments(t, b.env.Config, 200*time.Millisecond)
	standin.PlayOperator(t, b.env.Config, 200*time.Millisecond)

	o, err := install(t, b, lab, nil)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, o.stderr.String())
	}
	checkSteps(t, o.stderr.String(), "")
	if !strings.Contains(o.stderr.String(), "charts through k3s's helm-controller (HelmChart objects)") {
		t.Errorf("the run did not say how charts go in:\n%s", o.stderr.String())
	}
	for _, hc := range []struct{ name, chart, version, ns string }{
		{"cert-manager", "cert-manager", "v1.21.2", "cert-manager"},
		{"capi-operator", "cluster-api-operator", "0.28.0", "capi-operator-system"},
	} {
		obj := get(t, b, schema.GroupVersionKind{Group: "helm.cattle.io", Version: "v1", Kind: "HelmChart"}, "kube-system", hc.name)
		if str(obj, "spec", "chart") != hc.chart || str(obj, "spec", "version") != hc.version || str(obj, "spec", "repo") != repo.URL || str(obj, "spec", "targetNamespace") != hc.ns {
			t.Errorf("HelmChart %s spec = %v", hc.name, obj.Object["spec"])
		}
	}
	checkProviders(t, b)
	checkRBAC(t, b)

	t.Run("no-op re-run", func(t *testing.T) {
		again := bedFor(b.env)
		began := time.Now()
		o, err := install(t, again, lab, nil)
		took := time.Since(began)
		if err != nil {
			t.Fatalf("re-run: %v\n%s", err, o.stderr.String())
		}
		if n := again.writes.Load(); n != 0 {
			t.Errorf("the re-run made %d write requests; want 0:\n%s", n, o.stderr.String())
		}
		checkSteps(t, o.stderr.String(), "up to date")
		t.Logf("no-op re-run: %s, %d writes", took, again.writes.Load())
	})

	t.Run("status", func(t *testing.T) {
		var o out
		r, err := mgmt.Status(ctx(t), mgmt.StatusOptions{IO: o.io(), Lab: lab, Mgmt: static(bedFor(b.env).client), Output: "json"})
		if err != nil {
			t.Fatalf("status: %v\n%s", err, o.stdout.String())
		}
		var got mgmt.Report
		if err := json.Unmarshal(o.stdout.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if !got.Ready || got.Charts != "helm-controller" || len(got.Components) != len(wantSteps) {
			t.Fatalf("status = %+v", got)
		}
		for i, c := range got.Components {
			if !c.Ready || c.Installed != c.Wanted || !strings.HasPrefix(wantSteps[i], c.Name+" ") {
				t.Errorf("component %d = %+v", i, c)
			}
		}
		if r.Components[1].Installed != "0.28.0" {
			t.Errorf("operator installed = %q", r.Components[1].Installed)
		}
	})
}

func TestInstallWithHelmSDKFromStandInChartRepo(t *testing.T) {
	repo := standin.ServeRepo(t)
	b := newBed(t, "capi") // no helm-controller: the Helm SDK installs; the operator chart brings its CRDs
	lab := ownerLab(t, repo.URL)
	standin.PlayDeployments(t, b.env.Config, 100*time.Millisecond)
	standin.PlayOperator(t, b.env.Config, 100*time.Millisecond)

	o, err := install(t, b, lab, nil)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, o.stderr.String())
	}
	checkSteps(t, o.stderr.String(), "")
	if !strings.Contains(o.stderr.String(), "charts through the Helm SDK") {
		t.Errorf("the run did not say how charts go in:\n%s", o.stderr.String())
	}
	for _, crd := range []string{"certificates.cert-manager.io", "coreproviders.operator.cluster.x-k8s.io", "ipamproviders.operator.cluster.x-k8s.io"} {
		if d, err := b.client.CRD(ctx(t), crd); err != nil || !d.Established {
			t.Errorf("CRD %s from the chart: %+v %v", crd, d, err)
		}
	}
	checkProviders(t, b)
	checkRBAC(t, b)

	again := bedFor(b.env)
	o, err = install(t, again, lab, nil)
	if err != nil {
		t.Fatalf("re-run: %v\n%s", err, o.stderr.String())
	}
	if n := again.writes.Load(); n != 0 {
		t.Errorf("the re-run made %d write requests; want 0", n)
	}
	checkSteps(t, o.stderr.String(), "up to date")
	if d := repo.Requests(); d != 2 {
		t.Errorf("charts were downloaded %d times; want 2 (once each, and not again on the re-run)", d)
	}

	var so out
	if _, err := mgmt.Status(ctx(t), mgmt.StatusOptions{IO: so.io(), Lab: lab, Mgmt: static(bedFor(b.env).client)}); err != nil {
		t.Fatalf("status: %v\n%s", err, so.stdout.String())
	}
	table := so.stdout.String()
	for _, want := range []string{
		"COMPONENT                        WANTED     INSTALLED   READY   REASON",
		"cert-manager                     v1.21.2    v1.21.2     yes",
		"InfrastructureProvider proxmox   v0.9.0     v0.9.0      yes",
		"cluster-autoscaler RBAC          v1.35.0    v1.35.0     yes",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("status table lacks %q:\n%s", want, table)
		}
	}
}

func TestTimeoutNamesComponentAndConditionAndKeepsWhatWasApplied(t *testing.T) {
	repo := standin.ServeRepo(t)
	b := newBed(t, "capi", "operator", "helm-controller")
	lab := ownerLab(t, repo.URL)
	standin.PlayHelmController(t, b.env.Config)
	standin.PlayDeployments(t, b.env.Config, 0)
	op := standin.PlayOperator(t, b.env.Config, 0).Skip("proxmox") // the stand-in never gets CAPMOX ready

	// Long enough for the stand-in helm-controller to install the charts on
	// a loaded machine; the provider then uses all of it.
	o, err := install(t, b, lab, func(o *mgmt.InstallOptions) { o.Timeout = 8 * time.Second })
	var te *kube.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v, want a timeout\n%s", err, o.stderr.String())
	}
	want := "InfrastructureProvider proxmox v0.9.0: timed out after 8s waiting for InfrastructureProvider capmox-system/proxmox to be Ready with installedVersion v0.9.0 (last seen: no status conditions yet)"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("err = %q\nwant prefix %q", err, want)
	}
	if !strings.Contains(err.Error(), "run 'labctl mgmt install' again") {
		t.Errorf("err does not say what to do next: %q", err)
	}
	if !strings.Contains(o.stderr.String(), ui.SymbolFail+" InfrastructureProvider proxmox v0.9.0 (") {
		t.Errorf("no failed line for the component:\n%s", o.stderr.String())
	}
	// What was applied stays; what comes after was not started.
	get(t, b, provider("InfrastructureProvider"), "capmox-system", "proxmox")
	get(t, b, provider("CoreProvider"), "capi-system", "cluster-api")
	if _, found, _ := b.client.Get(ctx(t), kube.Ref{GVK: provider("IPAMProvider"), Namespace: "capi-ipam-in-cluster-system", Name: "in-cluster"}); found {
		t.Error("the IPAM provider was applied after a failed step")
	}

	// The operator gets there; the next run finishes the job.
	op.Stop()
	standin.PlayOperator(t, b.env.Config, 0)
	o, err = install(t, b, lab, nil)
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, o.stderr.String())
	}
	got := steps(o.stderr.String())
	if len(got) != len(wantSteps) || !strings.HasSuffix(got[0], "(up to date)") || strings.HasSuffix(got[6], "(up to date)") {
		t.Errorf("second run lines:\n%s", strings.Join(got, "\n"))
	}
	checkProviders(t, b)
}

func TestDryRunPrintsEveryObjectAndWritesNothing(t *testing.T) {
	repo := standin.ServeRepo(t)
	b := newBed(t, "capi", "operator", "helm-controller")
	lab := ownerLab(t, repo.URL)
	// Dry runs never read the token secret (issue 14): it is not set.
	os.Unsetenv("PVE_TOKEN_SECRET")
	o, err := install(t, b, lab, func(o *mgmt.InstallOptions) { o.DryRun = true; o.Output = "yaml" })
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, o.stderr.String())
	}
	if want := "apply Secret capmox-system/proxmox-variables with PROXMOX_SECRET from env PVE_TOKEN_SECRET (not read in a dry run)"; !strings.Contains(o.stderr.String(), want) {
		t.Errorf("the plan does not say the Secret's value is not read; want %q in:\n%s", want, o.stderr.String())
	}
	refs := printedRefs(t, b, o)
	wantRefs := []string{
		"HelmChart kube-system/cert-manager", "HelmChart kube-system/capi-operator",
		"Namespace capi-system", "CoreProvider capi-system/cluster-api",
		"Namespace capi-kubeadm-bootstrap-system", "BootstrapProvider capi-kubeadm-bootstrap-system/kubeadm",
		"Namespace capi-kubeadm-control-plane-system", "ControlPlaneProvider capi-kubeadm-control-plane-system/kubeadm",
		"Namespace capmox-system", "Secret capmox-system/proxmox-variables", "ConfigMap capmox-system/proxmox-ca", "InfrastructureProvider capmox-system/proxmox",
		"Namespace capi-ipam-in-cluster-system", "IPAMProvider capi-ipam-in-cluster-system/in-cluster",
		"Namespace cluster-autoscaler", "ServiceAccount cluster-autoscaler/cluster-autoscaler",
		"ClusterRole labctl-cluster-autoscaler-management", "ClusterRoleBinding labctl-cluster-autoscaler-management",
	}
	if strings.Join(refs, "\n") != strings.Join(wantRefs, "\n") {
		t.Errorf("dry run printed:\n%s\nwant:\n%s", strings.Join(refs, "\n"), strings.Join(wantRefs, "\n"))
	}
	if !strings.Contains(o.stdout.String(), "PROXMOX_SECRET: (secret, from env PVE_TOKEN_SECRET; not shown)") {
		t.Errorf("the Secret does not say where its value comes from:\n%s", o.stdout.String())
	}
	for _, line := range []string{"Dry run: nothing is applied.", "! cert-manager v1.21.2 (would change)", "would: create HelmChart kube-system/cert-manager"} {
		if !strings.Contains(o.stderr.String(), line) {
			t.Errorf("stderr lacks %q:\n%s", line, o.stderr.String())
		}
	}

	t.Run("json", func(t *testing.T) {
		o, err := install(t, b, lab, func(o *mgmt.InstallOptions) { o.DryRun = true; o.Output = "json" })
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Kind  string           `json:"kind"`
			Items []map[string]any `json:"items"`
		}
		if err := json.Unmarshal(o.stdout.Bytes(), &list); err != nil || list.Kind != "List" || len(list.Items) != len(wantRefs) {
			t.Errorf("-o json: kind %q, %d items, %v", list.Kind, len(list.Items), err)
		}
	})

	t.Run("without --dry-run -o yaml is refused", func(t *testing.T) {
		_, err := install(t, b, lab, func(o *mgmt.InstallOptions) { o.Output = "yaml" })
		if err == nil || !strings.Contains(err.Error(), "add --dry-run") {
			t.Errorf("err = %v", err)
		}
	})
}

// Offline, a dry run with the Helm SDK cannot render the charts: it
// prints every other object, says which charts are missing and why, and
// names --offline-dir, where before it failed on the first download.
func TestDryRunOfflinePrintsTheRest(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	b := newBed(t, "capi", "operator")
	lab := ownerLab(t, dead)
	o, err := install(t, b, lab, func(o *mgmt.InstallOptions) { o.DryRun = true; o.Output = "yaml"; o.Charts = mgmt.HelmSDK })
	if err != nil {
		t.Fatalf("offline dry run: %v\n%s", err, o.stderr.String())
	}
	if n := b.writes.Load(); n != 0 {
		t.Errorf("the dry run made %d write requests", n)
	}
	for _, chart := range []string{"cert-manager v1.21.2", "cluster-api-operator 0.28.0"} {
		want := "not rendered: chart " + chart + ", whose repository did not answer ("
		if !strings.Contains(o.stderr.String(), "! "+want) || !strings.Contains(o.stdout.String(), "# "+want) {
			t.Errorf("neither stderr nor stdout says %q:\n%s\n%s", want, o.stderr.String(), o.stdout.String())
		}
	}
	if !strings.Contains(o.stderr.String(), "connection refused); --offline-dir DIR with the chart's archive in it renders it without the network") {
		t.Errorf("stderr does not name --offline-dir:\n%s", o.stderr.String())
	}
	refs := strings.Join(printedRefs(t, b, o), "\n")
	for _, want := range []string{"CoreProvider capi-system/cluster-api", "ClusterRoleBinding labctl-cluster-autoscaler-management"} {
		if !strings.Contains(refs, want) {
			t.Errorf("the offline dry run lacks %s:\n%s", want, refs)
		}
	}
}

// With the libvirt provider enabled, the dry run's plan and printed
// objects hold it after the upstream providers: its namespace, the
// ConfigMap of the components the binary carries (its Deployment on
// labctl's image at labctl's version) and the InfrastructureProvider
// pointing at it.
func TestDryRunShowsTheLibvirtProvider(t *testing.T) {
	repo := standin.ServeRepo(t)
	b := newBed(t, "capi", "operator", "helm-controller")
	lab := ownerLab(t, repo.URL)
	lab.Management.Stack.Libvirt.Enabled = true
	o, err := install(t, b, lab, func(o *mgmt.InstallOptions) { o.DryRun = true; o.Output = "yaml" })
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, o.stderr.String())
	}
	if n := b.writes.Load(); n != 0 {
		t.Errorf("the dry run made %d write requests", n)
	}
	v := release.DevVersion
	cmName := "infrastructure-libvirt-" + v
	for _, line := range []string{
		"! InfrastructureProvider libvirt " + v + " (would change)",
		"would: create Namespace " + release.Namespace,
		"would: create ConfigMap " + release.Namespace + "/" + cmName,
		"would: create InfrastructureProvider " + release.Namespace + "/libvirt",
		"! this labctl is a development build (version \"dev\"), so the libvirt provider is installed as " + v + ", and no release publishes " +
			release.Image(versions.MustGet().LibvirtProvider, v) + ": its pods start only if that image is already in the management VM's containerd",
	} {
		if !strings.Contains(o.stderr.String(), line) {
			t.Errorf("the plan lacks %q:\n%s", line, o.stderr.String())
		}
	}
	objs, err := kube.ParseObjects("stdout", o.stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	var cm, cr *unstructured.Unstructured
	for _, obj := range objs {
		refs = append(refs, kube.RefOf(obj).String())
		switch kube.RefOf(obj).String() {
		case "ConfigMap " + release.Namespace + "/" + cmName:
			cm = obj
		case "InfrastructureProvider " + release.Namespace + "/libvirt":
			cr = obj
		}
	}
	want := "IPAMProvider capi-ipam-in-cluster-system/in-cluster\nNamespace " + release.Namespace + "\nConfigMap " + release.Namespace + "/" + cmName +
		"\nInfrastructureProvider " + release.Namespace + "/libvirt\nNamespace cluster-autoscaler"
	if !strings.Contains(strings.Join(refs, "\n"), want) {
		t.Fatalf("dry run printed:\n%s\nwant, in order:\n%s", strings.Join(refs, "\n"), want)
	}
	if str(cr, "spec", "version") != v {
		t.Errorf("InfrastructureProvider libvirt spec.version %q, want %q", str(cr, "spec", "version"), v)
	}
	image := "image: " + release.Image(versions.MustGet().LibvirtProvider, v) + "\n"
	if !strings.Contains(str(cm, "data", "components"), image) {
		t.Errorf("the printed ConfigMap's components lack %q", image)
	}
}

func TestEmitK3sManifests(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	lab := ownerLab(t, "https://charts.example.test")
	var o out
	files, err := mgmt.EmitK3sManifests(mgmt.EmitOptions{IO: o.io(), Lab: lab, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	o.noSecret(t)
	if len(files) != 2 || filepath.Base(files[0]) != "labctl-cert-manager.yaml" || filepath.Base(files[1]) != "labctl-capi-operator.yaml" {
		t.Fatalf("files = %v", files)
	}
	if o.stdout.String() != files[0]+"\n"+files[1]+"\n" {
		t.Errorf("stdout = %q, want the file paths", o.stdout.String())
	}
	// The files are valid HelmCharts: a real API server with k3s's CRD takes them.
	b := newBed(t, "helm-controller")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := kube.ParseObjects(f, data)
		if err != nil || len(objs) != 1 || objs[0].GetKind() != "HelmChart" {
			t.Fatalf("%s: %d objects, %v", f, len(objs), err)
		}
		if _, err := b.client.Apply(ctx(t), objs, kube.ApplyOptions{}); err != nil {
			t.Errorf("%s is not accepted by the API server: %v", f, err)
		}
	}
	before, _ := os.Stat(files[0])
	time.Sleep(10 * time.Millisecond)
	if _, err := mgmt.EmitK3sManifests(mgmt.EmitOptions{IO: o.io(), Lab: lab, Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(files[0]); !after.ModTime().Equal(before.ModTime()) {
		t.Error("writing the same manifests again rewrote the file")
	}
}

// An air-gapped install: charts from .tgz files, providers from ConfigMaps
// the operator finds through spec.fetchConfig.selector.
// Both ways charts go in: the Helm SDK reads the .tgz, and a HelmChart
// carries it in spec.chartContent to helm-controller.
func TestOfflineInstall(t *testing.T) {
	t.Run("helm-sdk", func(t *testing.T) { offlineInstall(t, mgmt.HelmSDK) })
	t.Run("helm-controller", func(t *testing.T) { offlineInstall(t, mgmt.HelmController) })
}

func offlineInstall(t *testing.T, mode mgmt.ChartMode) {
	sets := []string{"capi"}
	if mode == mgmt.HelmController {
		sets = append(sets, "operator", "helm-controller")
	}
	b := newBed(t, sets...)
	lab := ownerLab(t, "http://127.0.0.1:1/no-network-here")
	dir := t.TempDir()
	standin.Pinned(t, dir)
	// A core components file too big for a plain ConfigMap.
	big := strings.Repeat("# padding so the components must be gzipped\n", 20000)
	for _, p := range []struct{ label, version, file, content string }{
		{"cluster-api", "v1.12.11", "core-components.yaml", big},
		{"bootstrap-kubeadm", "v1.12.11", "bootstrap-components.yaml", "# bootstrap\n"},
		{"control-plane-kubeadm", "v1.12.11", "control-plane-components.yaml", "# kcp\n"},
		{"infrastructure-proxmox", "v0.9.0", "infrastructure-components.yaml", "# capmox\n"},
		{"ipam-in-cluster", "v1.0.3", "ipam-components.yaml", "# ipam\n"},
	} {
		d := filepath.Join(dir, p.label, p.version)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, p.file), []byte(p.content), 0o644); err != nil {
			t.Fatal(err)
		}
		md := "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries: []\n"
		if err := os.WriteFile(filepath.Join(d, "metadata.yaml"), []byte(md), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	standin.PlayDeployments(t, b.env.Config, 0)
	standin.PlayOperator(t, b.env.Config, 0)
	if mode == mgmt.HelmController {
		standin.PlayHelmController(t, b.env.Config)
	}

	o, err := install(t, b, lab, func(o *mgmt.InstallOptions) { o.OfflineDir = dir; o.Charts = mode })
	if err != nil {
		t.Fatalf("install: %v\n%s", err, o.stderr.String())
	}
	checkSteps(t, o.stderr.String(), "")
	checkProviders(t, b)
	if mode == mgmt.HelmController {
		hc := get(t, b, schema.GroupVersionKind{Group: "helm.cattle.io", Version: "v1", Kind: "HelmChart"}, "kube-system", "cert-manager")
		data, _ := os.ReadFile(filepath.Join(dir, "cert-manager-v1.21.2.tgz"))
		if str(hc, "spec", "chartContent") != base64.StdEncoding.EncodeToString(data) || str(hc, "spec", "repo") != "" {
			t.Errorf("offline HelmChart spec: repo %q, chartContent of %d bytes", str(hc, "spec", "repo"), len(str(hc, "spec", "chartContent")))
		}
	}

	// Find each provider's components as the operator does: by its selector,
	// in its namespace, the version from the label.
	for _, p := range []struct{ kind, ns, name, version string }{
		{"CoreProvider", "capi-system", "cluster-api", "v1.12.11"},
		{"InfrastructureProvider", "capmox-system", "proxmox", "v0.9.0"},
	} {
		cr := get(t, b, provider(p.kind), p.ns, p.name)
		sel, _, _ := unstructured.NestedStringMap(cr.Object, "spec", "fetchConfig", "selector", "matchLabels")
		var parts []string
		for k, v := range sel {
			parts = append(parts, k+"="+v)
		}
		cms, err := b.client.List(ctx(t), schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, p.ns, strings.Join(parts, ","))
		if err != nil || len(cms) != 1 {
			t.Fatalf("%s: %d ConfigMaps match %v (%v)", p.kind, len(cms), sel, err)
		}
		cm := cms[0]
		if cm.GetLabels()["provider.cluster.x-k8s.io/version"] != p.version {
			t.Errorf("%s ConfigMap version label = %v", p.kind, cm.GetLabels())
		}
		_, hasMeta, _ := unstructured.NestedString(cm.Object, "data", "metadata")
		_, plain, _ := unstructured.NestedString(cm.Object, "data", "components")
		_, zipped, _ := unstructured.NestedString(cm.Object, "binaryData", "components")
		if !hasMeta || plain == zipped || zipped != (p.name == "cluster-api") {
			t.Errorf("%s ConfigMap keys: metadata %v, components %v, gzipped components %v", p.kind, hasMeta, plain, zipped)
		}
	}

	again := bedFor(b.env)
	if o, err := install(t, again, lab, func(o *mgmt.InstallOptions) { o.OfflineDir = dir; o.Charts = mode }); err != nil {
		t.Fatalf("re-run: %v\n%s", err, o.stderr.String())
	}
	if n := again.writes.Load(); n != 0 {
		t.Errorf("the offline re-run made %d write requests", n)
	}
}

// static is the command factory's Mgmt for a client made already.
func static(c *kube.Client) func(context.Context) (*kube.Client, error) {
	return func(context.Context) (*kube.Client, error) { return c, nil }
}
