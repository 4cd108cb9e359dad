package box_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

// The runner plays the kubelet: Cluster API's own release components
// (config/default with the released image, variables substituted by
// clusterctl's processor), applied to the box after the real cert-manager
// chart (its work done by the stand-in), get the real manager
// running with the Deployment's args, the Deployment Available, the
// webhooks answered by that process; a changed Deployment restarts it, and
// a deleted one stops it.
func TestRunnerRunsCAPIDeployment(t *testing.T) {
	box.Require(t, "cluster-api")
	b := box.Start(t, box.Bare())
	kc := kube.NewForConfig(b.Env.Config, b.Env.Kubeconfig)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := upstream.ReleaseOf(ctx, root, "cluster-api")
	if err != nil {
		t.Fatal(err)
	}
	data, err := rel.Substitute(nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kube.ParseObjects("core-components.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	installCertManager(ctx, t, b)
	if _, err := kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
		t.Fatalf("applying Cluster API's components: %v", err)
	}
	const ns, name = "capi-system", "capi-controller-manager"
	if err := kc.WaitFor(ctx, kube.DeploymentGVK, ns, []string{name}, kube.DeploymentAvailable(), 3*time.Minute); err != nil {
		t.Fatalf("%v", err)
	}
	p := b.Runner.Proc(ns, name)
	if p == nil || !p.Running() || p.Image.Binary != "cluster-api" {
		t.Fatalf("runner process for %s/%s: %v", ns, name, p)
	}
	// The Deployment's own args, the listeners moved to loopback and
	// controller-runtime's leader election off (runner.Image says why).
	for _, want := range []string{"--leader-elect=false", "--insecure-diagnostics=false", "--feature-gates=MachinePool=true,ClusterTopology=false,RuntimeSDK=false,MachineSetPreflightChecks=true,MachineWaitForVolumeDetachConsiderVolumeAttachments=true,PriorityQueue=false,ReconcilerRateLimiting=false,InPlaceUpdates=false,MachineTaintPropagation=false"} {
		if !slices.Contains(p.Args, want) {
			t.Errorf("process args %q lack the Deployment's %s", p.Args, want)
		}
	}
	if !slices.ContainsFunc(p.Args, func(a string) bool { return strings.HasPrefix(a, "--diagnostics-address=127.0.0.1:") }) {
		t.Errorf("process args %q: diagnostics not moved to loopback", p.Args)
	}

	// cert-manager's job: the Certificate's Secret, the CA injected.
	sec, found, err := kc.Get(ctx, kube.Ref{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, Namespace: ns, Name: "capi-webhook-service-cert"})
	if err != nil || !found {
		t.Fatalf("the serving certificate's Secret: found %v, %v", found, err)
	}
	if a := sec.GetAnnotations(); a["cert-manager.io/certificate-name"] != "capi-serving-cert" || a["cert-manager.io/alt-names"] != "capi-webhook-service.capi-system.svc,capi-webhook-service.capi-system.svc.cluster.local" {
		t.Errorf("Secret annotations = %v, want cert-manager's for Certificate capi-serving-cert", a)
	}
	caCrt, _, _ := unstructured.NestedString(sec.Object, "data", "ca.crt")
	crd, _, err := kc.Get(ctx, kube.Ref{GVK: kube.CRDGVK, Name: "clusters.cluster.x-k8s.io"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle"); got == "" || got != caCrt {
		t.Errorf("CRD clusters conversion caBundle is not the Certificate's ca.crt (cainjector's inject-ca-from)")
	}

	// The real webhook answers through the pointed configuration.
	r := renderLab1(t)
	md := r.Find("MachineDeployment", r.Pools[0].MachineDeployment).DeepCopy()
	_ = unstructured.SetNestedField(md.Object, "v1.35", "spec", "template", "spec", "version")
	_, err = kc.Apply(ctx, []*unstructured.Unstructured{r.Objects[0], md}, kube.ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), `admission webhook "validation.machinedeployment.cluster.x-k8s.io" denied the request`) {
		t.Fatalf("a bad MachineDeployment: err = %v, want the real webhook's denial", err)
	}

	// It went through the Service, whose EndpointSlice the runner wrote:
	// the configuration is as the components have it.
	vwc, _, err := kc.Get(ctx, kube.Ref{GVK: schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"}, Name: "capi-validating-webhook-configuration"})
	if err != nil {
		t.Fatal(err)
	}
	hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
	for _, h := range hooks {
		svc, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name")
		url, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "url")
		if svc != "capi-webhook-service" || url != "" {
			t.Errorf("webhook clientConfig service %q url %q, want the components' Service and no URL", svc, url)
		}
	}

	t.Run("a changed Deployment restarts its process", func(t *testing.T) {
		d, found, err := kc.Get(ctx, kube.Ref{GVK: kube.DeploymentGVK, Namespace: ns, Name: name})
		if err != nil || !found {
			t.Fatal(err)
		}
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		c := cs[0].(map[string]any)
		c["args"] = append(c["args"].([]any), "--v=3")
		_ = unstructured.SetNestedSlice(d.Object, cs, "spec", "template", "spec", "containers")
		cl, err := kc.Ctrl()
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a new process with --v=3", func() bool {
			np := b.Runner.Proc(ns, name)
			return np != nil && np != p && np.Running() && slices.Contains(np.Args, "--v=3")
		})
		if p.Running() {
			t.Error("the old process still runs")
		}
		p = b.Runner.Proc(ns, name)
	})

	t.Run("a deleted Deployment stops its process", func(t *testing.T) {
		cl, err := kc.Ctrl()
		if err != nil {
			t.Fatal(err)
		}
		d := &unstructured.Unstructured{}
		d.SetGroupVersionKind(kube.DeploymentGVK)
		d.SetNamespace(ns)
		d.SetName(name)
		if err := cl.Delete(ctx, d); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the process to stop", func() bool { return !p.Running() && b.Runner.Proc(ns, name) == nil })
	})
}

// installCertManager installs the REAL cert-manager chart with the Helm
// SDK from a loopback chart repository, with labctl's values, and waits for its Deployments, which the
// stand-in runs; Helm's wait for the startupapicheck hook Job ends only
// when the stand-in's API check passed.
func installCertManager(ctx context.Context, t testing.TB, b *box.Box) {
	t.Helper()
	// The real chart, from a chart repository on loopback.
	repo := standin.ServeUpstreamRepo(t)
	pins := versions.MustGet()
	values := embeddedValues(t, "manifests/mgmt/cert-manager-values.yaml")
	hc := helm.New(b.Env.Config)
	rel := helm.Release{Name: "cert-manager", Namespace: "cert-manager", Values: values,
		Chart: helm.Chart{Name: "cert-manager", Version: pins.CertManagerChartVersion(), Repo: repo.URL}}
	if _, err := hc.Ensure(ctx, rel, 3*time.Minute); err != nil {
		t.Fatalf("installing the real cert-manager chart: %v", err)
	}
	kc := kube.NewForConfig(b.Env.Config, b.Env.Kubeconfig)
	if err := kc.WaitFor(ctx, kube.DeploymentGVK, "cert-manager", []string{"cert-manager", "cert-manager-cainjector", "cert-manager-webhook"}, kube.DeploymentAvailable(), time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
		if _, found, _ := kc.Get(ctx, kube.Ref{GVK: schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: kind}, Name: "cert-manager-webhook"}); found {
			t.Errorf("cert-manager's own %s is still there; nothing here serves it", kind)
		}
	}
}

// embeddedValues are the Helm values labctl carries at path in its
// embedded files, as 'mgmt install' reads them.
func embeddedValues(t testing.TB, path string) map[string]any {
	t.Helper()
	raw, err := embedded.FS.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return values
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
