package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
)

// labFile writes the owner's lab (examples/lab.yaml) with the charts
// pointed at repoURL, the loopback stand-in repository.
func labFile(t testing.TB, repoURL string) string {
	t.Helper()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	lab, _, err := config.Load(context.Background(), config.Request{Path: filepath.Join(root, "examples", "lab.yaml"), Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.Stack.ChartRepos = config.ChartRepos{CertManager: repoURL, ClusterAPIOperator: repoURL}
	data, err := config.Marshal(lab)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// labctlWrites counts the writes labctl made, from the API server's audit
// log, since the count given (0 for all).
func labctlWrites(t testing.TB, env *testbed.Env, since int) (total int, writes []string) {
	t.Helper()
	n := 0
	for _, ev := range env.Audit(t) {
		if !strings.HasPrefix(ev.UserAgent, "labctl") {
			continue
		}
		if ev.IsWrite() {
			n++
			if n > since {
				writes = append(writes, ev.Verb+" "+ev.RequestURI)
			}
		}
	}
	return n, writes
}

func dynGet(t testing.TB, env *testbed.Env, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	c := kube.NewForConfig(env.Config, env.Kubeconfig)
	obj, found, err := c.Get(t.Context(), kube.Ref{GVK: gvk, Namespace: ns, Name: name})
	if err != nil || !found {
		t.Fatalf("%s %s/%s: found %v, %v", gvk.Kind, ns, name, found, err)
	}
	return obj
}

func operatorKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "operator.cluster.x-k8s.io", Version: "v1alpha2", Kind: kind}
}

// kubectl runs the test bed's kubectl.
func kubectl(t testing.TB, stdin []byte, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(testbed.Assets(t), "kubectl"), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMgmtInstall walks one management cluster through what a user does:
// a dry run, a run that times out on a provider, the run that finishes,
// a no-op re-run and status. The test bed has the real CRDs of the
// pinned operator, helm-controller and Cluster API; stand-ins play the
// controllers that cannot run here.
func TestMgmtInstall(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi", "operator", "helm-controller"), testbed.WithAuditLog())
	repo := standin.ServeRepo(t)
	lab := labFile(t, repo.URL)
	base := []string{"mgmt", "install", "--kubeconfig", env.Kubeconfig, "-c", lab}

	t.Run("dry run prints every object and applies nothing", func(t *testing.T) {
		res := run(t, append(base, "--dry-run", "-o", "yaml", "-vvv")...)
		if res.code != 0 {
			t.Fatalf("exit %d\n%s", res.code, res.stderr)
		}
		if n, w := labctlWrites(t, env, 0); n != 0 {
			t.Fatalf("the dry run wrote %d times: %v", n, w)
		}
		objs, err := kube.ParseObjects("stdout", []byte(res.stdout))
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.GetKind()]++
		}
		want := map[string]int{"HelmChart": 2, "Namespace": 6, "Secret": 1, "CoreProvider": 1, "BootstrapProvider": 1,
			"ControlPlaneProvider": 1, "InfrastructureProvider": 1, "IPAMProvider": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1}
		for k, n := range want {
			if kinds[k] != n {
				t.Errorf("dry run printed %d %s, want %d (all: %v)", kinds[k], k, n, kinds)
			}
		}
		if !strings.Contains(res.stderr, "kube: +") {
			t.Errorf("-vvv did not log requests:\n%s", res.stderr)
		}
		// The printed objects pass the API server's strict validation, as
		// kubectl sends them (namespaces created first, so the rest can be
		// checked in them).
		var nss []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				nss = append(nss, o)
			}
		}
		nsYAML, _ := kube.MarshalYAML(nss)
		if out, err := kubectl(t, nsYAML, "--kubeconfig", env.Kubeconfig, "apply", "--server-side", "--field-manager", "test-setup", "-f", "-"); err != nil {
			t.Fatalf("kubectl: %v\n%s", err, out)
		}
		if out, err := kubectl(t, []byte(res.stdout), "--kubeconfig", env.Kubeconfig, "apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-"); err != nil {
			t.Errorf("the API server refuses the printed objects: %v\n%s", err, out)
		}
	})

	standin.PlayDeployments(t, env.Config, 100*time.Millisecond)
	standin.PlayHelmController(t, env.Config)
	operator := standin.PlayOperator(t, env.Config, 100*time.Millisecond).Skip("proxmox")

	t.Run("a provider that never gets ready times out", func(t *testing.T) {
		// Long enough for the charts on a loaded machine (8 s was not, for
		// a make test starved by another's); the provider then uses all
		// of it.
		res := run(t, append(base, "--timeout", "20s", "-vvv")...)
		if res.code != 1 {
			t.Fatalf("exit %d, want 1\n%s", res.code, res.stderr)
		}
		for _, want := range []string{
			"✗ InfrastructureProvider proxmox v0.9.0 (",
			"Error: InfrastructureProvider proxmox v0.9.0: timed out after 20s waiting for InfrastructureProvider capmox-system/proxmox to be Ready with installedVersion v0.9.0 (last seen: no status conditions yet)",
			"run 'labctl mgmt install' again",
		} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, res.stderr)
			}
		}
		// What was applied stays for the next run.
		dynGet(t, env, operatorKind("InfrastructureProvider"), "capmox-system", "proxmox")
		dynGet(t, env, schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, "capmox-system", "proxmox-variables")

		st := run(t, "mgmt", "status", "--kubeconfig", env.Kubeconfig, "-c", lab)
		if st.code != 1 || !strings.Contains(st.stdout, "InfrastructureProvider proxmox   v0.9.0     -           no      no status conditions yet") {
			t.Errorf("status after the timeout: exit %d\n%s%s", st.code, st.stdout, st.stderr)
		}
	})

	operator.Stop()
	standin.PlayOperator(t, env.Config, 100*time.Millisecond)

	var applied int
	t.Run("the next run finishes", func(t *testing.T) {
		res := run(t, append(base, "-vvv")...)
		if res.code != 0 {
			t.Fatalf("exit %d\n%s", res.code, res.stderr)
		}
		for _, want := range []string{"✓ cert-manager v1.21.2 (up to date)", "✓ InfrastructureProvider proxmox v0.9.0 (", "✓ cluster-autoscaler RBAC v1.35.0 ("} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("stderr lacks %q", want)
			}
		}
		for _, p := range []struct{ kind, ns, name, version string }{
			{"CoreProvider", "capi-system", "cluster-api", "v1.12.11"},
			{"BootstrapProvider", "capi-kubeadm-bootstrap-system", "kubeadm", "v1.12.11"},
			{"ControlPlaneProvider", "capi-kubeadm-control-plane-system", "kubeadm", "v1.12.11"},
			{"InfrastructureProvider", "capmox-system", "proxmox", "v0.9.0"},
			{"IPAMProvider", "capi-ipam-in-cluster-system", "in-cluster", "v1.0.3"},
		} {
			obj := dynGet(t, env, operatorKind(p.kind), p.ns, p.name)
			if v, _, _ := unstructured.NestedString(obj.Object, "spec", "version"); v != p.version {
				t.Errorf("%s %s spec.version = %q, want %s", p.kind, p.name, v, p.version)
			}
		}
		capmox := dynGet(t, env, operatorKind("InfrastructureProvider"), "capmox-system", "proxmox")
		if ref, _, _ := unstructured.NestedStringMap(capmox.Object, "spec", "configSecret"); ref["name"] != "proxmox-variables" || ref["namespace"] != "capmox-system" {
			t.Errorf("configSecret = %v", ref)
		}
		sec := dynGet(t, env, schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, "capmox-system", "proxmox-variables")
		data, _, _ := unstructured.NestedStringMap(sec.Object, "data")
		if got, _ := base64.StdEncoding.DecodeString(data["PROXMOX_SECRET"]); string(got) != secret {
			t.Error("the CAPMOX Secret does not hold the token secret from PVE_TOKEN_SECRET")
		}
		applied, _ = labctlWrites(t, env, 0)
	})

	t.Run("a second run makes zero write requests", func(t *testing.T) {
		began := time.Now()
		res := run(t, append(base, "-vvv")...)
		took := time.Since(began)
		if res.code != 0 {
			t.Fatalf("exit %d\n%s", res.code, res.stderr)
		}
		if _, w := labctlWrites(t, env, applied); len(w) != 0 {
			t.Errorf("the API server's audit log has %d writes by the re-run: %v", len(w), w)
		}
		if n := strings.Count(res.stderr, "(up to date)"); n != 8 {
			t.Errorf("%d steps up to date, want 8:\n%s", n, res.stderr)
		}
		for _, verb := range []string{"kube: PATCH ", "kube: POST ", "kube: PUT ", "kube: DELETE "} {
			if strings.Contains(res.stderr, verb) {
				t.Errorf("the re-run logged a write (%s):\n%s", verb, res.stderr)
			}
		}
		t.Logf("no-op re-run of the binary at -vvv: %s", took.Round(time.Millisecond))
	})

	t.Run("status", func(t *testing.T) {
		res := run(t, "mgmt", "status", "--kubeconfig", env.Kubeconfig, "-c", lab, "-o", "json")
		if res.code != 0 {
			t.Fatalf("exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		var r struct {
			Charts     string `json:"charts"`
			Ready      bool   `json:"ready"`
			Components []struct {
				Name, Wanted, Installed string
				Ready                   bool
			} `json:"components"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
			t.Fatal(err)
		}
		if !r.Ready || r.Charts != "helm-controller" || len(r.Components) != 8 {
			t.Errorf("status = %+v", r)
		}
		for _, c := range r.Components {
			if !c.Ready || c.Installed != c.Wanted {
				t.Errorf("component %+v", c)
			}
		}
	})
}

// The Helm SDK path through the binary, at the highest verbosity, so Helm's
// own debug lines are checked for the secret too.
func TestMgmtInstallWithHelmSDK(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi"))
	repo := standin.ServeRepo(t)
	lab := labFile(t, repo.URL)
	standin.PlayDeployments(t, env.Config, 50*time.Millisecond)
	standin.PlayOperator(t, env.Config, 50*time.Millisecond)
	res := run(t, "mgmt", "install", "--kubeconfig", env.Kubeconfig, "-c", lab, "--charts", "helm-sdk", "-vvv")
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	if !strings.Contains(res.stderr, "charts through the Helm SDK") || !strings.Contains(res.stderr, "helm: ") {
		t.Errorf("no Helm SDK run at -vvv:\n%s", res.stderr)
	}
	st := run(t, "mgmt", "status", "--kubeconfig", env.Kubeconfig, "-c", lab)
	if st.code != 0 || !strings.Contains(st.stdout, "cluster-api-operator             0.28.0     0.28.0      yes") {
		t.Errorf("status: exit %d\n%s%s", st.code, st.stdout, st.stderr)
	}
}

func TestMgmtInstallEmitK3sManifests(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k3s")
	res := run(t, "mgmt", "install", "-c", "examples/lab.yaml", "--emit-k3s-manifests", dir)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, res.stderr)
	}
	want := filepath.Join(dir, "labctl-cert-manager.yaml") + "\n" + filepath.Join(dir, "labctl-capi-operator.yaml") + "\n"
	if res.stdout != want {
		t.Errorf("stdout = %q, want the two file paths", res.stdout)
	}
	data, err := os.ReadFile(filepath.Join(dir, "labctl-cert-manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"kind: HelmChart", "namespace: kube-system", "repo: https://charts.jetstack.io", "version: v1.21.2", "targetNamespace: cert-manager"} {
		if !strings.Contains(string(data), s) {
			t.Errorf("the cert-manager manifest lacks %q:\n%s", s, data)
		}
	}
}

func TestMgmtInstallBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no management cluster yet", nil, []string{"mgmt", "install", "-c", "examples/lab.yaml"},
			"no management cluster yet for lab \"home\" (no kubeconfig at "},
		{"missing kubeconfig", nil, []string{"mgmt", "install", "-c", "examples/lab.yaml", "--kubeconfig", "/nonexistent/kc"},
			"kubeconfig /nonexistent/kc does not exist (named by --kubeconfig or LABCTL_KUBECONFIG): check the path"},
		{"token secret not exported", []string{"PVE_TOKEN_SECRET="}, []string{"mgmt", "install", "-c", "examples/lab.yaml", "--kubeconfig", "/nonexistent/kc"},
			"hypervisors[pve].proxmox.tokenSecret.env: PVE_TOKEN_SECRET is set but empty: export PVE_TOKEN_SECRET=<the secret of token "},
		{"objects without dry run", nil, []string{"mgmt", "install", "-c", "examples/lab.yaml", "--kubeconfig", "/nonexistent/kc", "-o", "yaml"},
			"-o yaml prints the objects of a dry run; add --dry-run"},
		{"offline folder missing", nil, []string{"mgmt", "install", "-c", "examples/lab.yaml", "--offline-dir", "/nonexistent/offline"},
			"offline folder /nonexistent/offline (management.stack.offlineDir or --offline-dir) does not exist"},
		{"bad output", nil, []string{"mgmt", "status", "-o", "xml"}, "--output \"xml\": must be one of text, json, yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runEnv(t, tc.env, tc.args...)
			if res.code == 0 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant it to contain %q", res.code, res.stderr, tc.want)
			}
			if strings.Contains(res.stderr, "panic") || strings.Contains(res.stderr, "goroutine ") {
				t.Errorf("labctl panicked:\n%s", res.stderr)
			}
		})
	}
}
