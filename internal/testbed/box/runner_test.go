package box_test

import (
	"context"
	"encoding/base64"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testbed"
	"github.com/labctl/labctl/internal/testbed/box"
	"github.com/labctl/labctl/internal/testbed/pki"
	"github.com/labctl/labctl/internal/testbed/upstream"
)

// playCertManager does by hand, for this test only, what cert-manager does
// for the components: each Certificate becomes its Secret, each
// inject-ca-from caBundle is filled. The certificate names 127.0.0.1 too:
// the API server reaches the webhook on loopback here.
func playCertManager(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	ca, err := pki.NewCA("test cert-manager CA")
	if err != nil {
		t.Fatal(err)
	}
	caB64 := base64.StdEncoding.EncodeToString(ca.PEM)
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GroupVersionKind().Group == "cert-manager.io" {
			if o.GetKind() == "Certificate" {
				dns, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
				secret, _, _ := unstructured.NestedString(o.Object, "spec", "secretName")
				pair, err := ca.Serving(dns, []net.IP{pki.Loopback})
				if err != nil {
					t.Fatal(err)
				}
				s := &unstructured.Unstructured{Object: map[string]any{"type": "kubernetes.io/tls", "data": map[string]any{
					"tls.crt": base64.StdEncoding.EncodeToString(pair.Cert), "tls.key": base64.StdEncoding.EncodeToString(pair.Key), "ca.crt": caB64,
				}}}
				s.SetAPIVersion("v1")
				s.SetKind("Secret")
				s.SetNamespace(o.GetNamespace())
				s.SetName(secret)
				out = append(out, s)
			}
			continue
		}
		if o.GetAnnotations()["cert-manager.io/inject-ca-from"] != "" {
			switch o.GetKind() {
			case "CustomResourceDefinition":
				if _, ok, _ := unstructured.NestedMap(o.Object, "spec", "conversion", "webhook", "clientConfig"); ok {
					_ = unstructured.SetNestedField(o.Object, caB64, "spec", "conversion", "webhook", "clientConfig", "caBundle")
				}
			case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
				hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
				for _, h := range hooks {
					_ = unstructured.SetNestedField(h.(map[string]any), caB64, "clientConfig", "caBundle")
				}
				_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
			}
		}
		out = append(out, o)
	}
	return out
}

// The runner plays the kubelet: Cluster API's own release components
// (config/default with the released image, variables substituted by
// clusterctl's processor), applied to the box, get the real manager
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
	if _, err := kc.Apply(ctx, playCertManager(t, objs), kube.ApplyOptions{}); err != nil {
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

	// The real webhook answers through the pointed configuration.
	r := renderLab1(t)
	md := r.Find("MachineDeployment", r.MachineDeployment).DeepCopy()
	_ = unstructured.SetNestedField(md.Object, "v1.35", "spec", "template", "spec", "version")
	_, err = kc.Apply(ctx, []*unstructured.Unstructured{r.Objects[0], md}, kube.ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), `admission webhook "validation.machinedeployment.cluster.x-k8s.io" denied the request`) {
		t.Fatalf("a bad MachineDeployment: err = %v, want the real webhook's denial", err)
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
