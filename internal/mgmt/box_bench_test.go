package mgmt_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// BenchmarkBoxInstall: 'mgmt install' until every provider is Ready on
// the box, against the same manifests (labctl's dry run, the charts
// rendered) applied with kubectl by hand: each chart's objects, wait for
// its Deployments, then labctl's own objects, and wait for each Provider's
// Ready. Each iteration gets a fresh box (not timed). Run with
// -benchtime=1x: an iteration takes minutes.
func BenchmarkBoxInstall(b *testing.B) {
	b.Run("labctl mgmt install", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			bx, _, lab, dir := realBox(b)
			bed := bedFor(bx.Env)
			b.StartTimer()
			if o, err := install(b, bed, lab, func(o *mgmt.InstallOptions) {
				o.OfflineDir, o.Charts, o.Timeout = dir, mgmt.HelmSDK, 5*time.Minute
			}); err != nil {
				b.Fatalf("install: %v\n%s", err, o.stderr.String())
			}
		}
	})
	b.Run("kubectl apply", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			bx, pve, lab, dir := realBox(b)
			bed := bedFor(bx.Env)
			o, err := install(b, bed, lab, func(o *mgmt.InstallOptions) {
				o.OfflineDir, o.Charts, o.DryRun, o.Output = dir, mgmt.HelmSDK, true, "yaml"
			})
			if err != nil {
				b.Fatalf("dry run: %v\n%s", err, o.stderr.String())
			}
			objs, err := kube.ParseObjects("dry run", o.stdout.Bytes())
			if err != nil {
				b.Fatal(err)
			}
			phases := splitPhases(b, objs, pve.Secret)
			kubectl := filepath.Join(testbed.Assets(b), "kubectl")
			run := func(args ...string) {
				cmd := exec.Command(kubectl, args...)
				cmd.Env = append(os.Environ(), "KUBECONFIG="+bx.Env.Kubeconfig)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("kubectl %v: %v\n%s", args, err, out)
				}
			}
			files := make([]string, len(phases))
			for i, p := range phases {
				data, err := kube.MarshalYAML(p)
				if err != nil {
					b.Fatal(err)
				}
				files[i] = filepath.Join(b.TempDir(), "phase.yaml")
				if err := os.WriteFile(files[i], data, 0o600); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			run("apply", "--server-side", "-f", files[0])
			run("wait", "--for=condition=Available", "deployment", "--all", "-n", components.CertManagerNamespace, "--timeout=5m")
			run("wait", "--for=condition=Complete", "job", "--all", "-n", components.CertManagerNamespace, "--timeout=5m")
			run("apply", "--server-side", "-f", files[1])
			run("wait", "--for=condition=Available", "deployment", "--all", "-n", components.OperatorNamespace, "--timeout=5m")
			run("apply", "--server-side", "-f", files[2])
			for _, p := range []string{"coreprovider/cluster-api -n capi-system", "bootstrapprovider/kubeadm -n capi-kubeadm-bootstrap-system",
				"controlplaneprovider/kubeadm -n capi-kubeadm-control-plane-system", "infrastructureprovider/proxmox -n capmox-system",
				"ipamprovider/in-cluster -n capi-ipam-in-cluster-system"} {
				run(append([]string{"wait", "--for=condition=Ready", "--timeout=5m"}, strings.Fields(p)...)...)
			}
		}
	})
}

// splitPhases cuts labctl's dry-run objects into cert-manager's chart,
// the operator's chart and labctl's own objects, with each chart's
// namespace first (Helm makes it) and the Proxmox Secret's real values
// back in place of what the dry run prints.
func splitPhases(b *testing.B, objs []*unstructured.Unstructured, secret string) [3][]*unstructured.Unstructured {
	var phases [3][]*unstructured.Unstructured
	ns := func(name string) *unstructured.Unstructured {
		n := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
		return n
	}
	phases[0] = append(phases[0], ns(components.CertManagerNamespace))
	phases[1] = append(phases[1], ns(components.OperatorNamespace))
	for _, o := range objs {
		switch {
		case o.GetLabels()["app.kubernetes.io/managed-by"] == "labctl":
			if o.GetKind() == "Secret" {
				sd, _, _ := unstructured.NestedStringMap(o.Object, "stringData")
				sd["PROXMOX_SECRET"] = secret
				_ = unstructured.SetNestedStringMap(o.Object, sd, "stringData")
			}
			phases[2] = append(phases[2], o)
		case o.GetNamespace() == components.CertManagerNamespace || o.GetLabels()["app.kubernetes.io/instance"] == components.CertManagerRelease:
			phases[0] = append(phases[0], o)
		default:
			phases[1] = append(phases[1], o)
		}
	}
	if len(phases[2]) == 0 {
		b.Fatal("the dry run printed none of labctl's own objects")
	}
	return phases
}
