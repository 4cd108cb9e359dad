package integration

// Benchmarks of 'labctl mgmt install', the built binary against the real
// API server of the test bed:
//
//	go test ./test -run '^$' -bench 'MgmtInstall' -benchtime 5x
//
// BenchmarkMgmtInstallNoop times a re-run on a finished management
// cluster (goal: under 2 s) and counts its writes from the audit log.
// BenchmarkMgmtInstallVsKubectl times installing the rendered stack onto a
// fresh API against 'kubectl apply --server-side' of the same objects, one
// file per component, in the same run.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/versions"
)

func BenchmarkMgmtInstallNoop(b *testing.B) {
	env := testbed.Start(b, testbed.WithCRDs("capi", "operator", "helm-controller"), testbed.WithAuditLog())
	repo := standin.ServeRepo(b)
	lab := labFile(b, repo.URL)
	standin.PlayDeployments(b, env.Config, 0)
	standin.PlayHelmController(b, env.Config)
	standin.PlayOperator(b, env.Config, 0)
	args := []string{"mgmt", "install", "--kubeconfig", env.Kubeconfig, "-c", lab}
	if res := run(b, args...); res.code != 0 {
		b.Fatalf("first run: exit %d\n%s", res.code, res.stderr)
	}
	before, _ := labctlWrites(b, env, 0)
	b.ResetTimer()
	for b.Loop() {
		if res := run(b, args...); res.code != 0 || strings.Count(res.stderr, "(up to date)") != 8 {
			b.Fatalf("re-run: exit %d\n%s", res.code, res.stderr)
		}
	}
	total, writes := labctlWrites(b, env, before)
	b.ReportMetric(float64(total-before)/float64(b.N), "writes/op")
	if len(writes) > 0 {
		b.Errorf("no-op re-runs wrote: %v", writes)
	}
}

// renderPerComponent writes the objects 'mgmt install' applies, one file
// per component in install order, as a user feeding kubectl would have
// them: HelmCharts for the charts, then each provider's and the RBAC's.
func renderPerComponent(b *testing.B, labPath string) string {
	b.Helper()
	b.Setenv("PVE_TOKEN_SECRET", secret)
	lab, _, err := config.Load(context.Background(), config.Request{Path: labPath, Explicit: true})
	if err != nil {
		b.Fatal(err)
	}
	cs, err := components.Build(lab, versions.MustGet(), components.Options{ReadSecret: (*config.Hypervisor).ReadTokenSecret})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for i, c := range cs {
		objs := c.Objects
		if c.Chart != nil {
			hc, err := c.Chart.HelmChart()
			if err != nil {
				b.Fatal(err)
			}
			objs = []*unstructured.Unstructured{hc}
		}
		data, err := kube.MarshalYAML(objs)
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("%02d-%s.yaml", i, strings.ReplaceAll(strings.ToLower(c.Name), " ", "-"))
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

func BenchmarkMgmtInstallVsKubectl(b *testing.B) {
	repo := standin.ServeRepo(b)
	lab := labFile(b, repo.URL)
	files := renderPerComponent(b, lab)
	entries, _ := os.ReadDir(files)
	labctl(b) // build outside the timings
	kubectlBin := filepath.Join(testbed.Assets(b), "kubectl")
	fresh := func() *testbed.Env {
		// The operator's and helm-controller's CRDs are there, as on a k3s
		// VM where the operator chart is in; no objects yet.
		return testbed.Start(b, testbed.WithCRDs("operator", "helm-controller"))
	}

	var labctlTime, kubectlTime, kubectlOneTime time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		envL, envK, envK1 := fresh(), fresh(), fresh()
		b.StartTimer()

		began := time.Now()
		res := run(b, "mgmt", "install", "--kubeconfig", envL.Kubeconfig, "-c", lab, "--wait=false")
		labctlTime += time.Since(began)
		if res.code != 0 {
			b.Fatalf("labctl: exit %d\n%s", res.code, res.stderr)
		}

		home := b.TempDir() // kubectl's discovery cache lives here, as a user's would
		began = time.Now()
		for _, e := range entries {
			if out, err := kubectlRun(b, kubectlBin, home, "--kubeconfig", envK.Kubeconfig, "apply", "--server-side", "-f", filepath.Join(files, e.Name())); err != nil {
				b.Fatalf("kubectl %s: %v\n%s", e.Name(), err, out)
			}
		}
		kubectlTime += time.Since(began)

		// For reference: one kubectl process for the whole folder.
		home = b.TempDir()
		began = time.Now()
		if out, err := kubectlRun(b, kubectlBin, home, "--kubeconfig", envK1.Kubeconfig, "apply", "--server-side", "-f", files); err != nil {
			b.Fatalf("kubectl -f %s: %v\n%s", files, err, out)
		}
		kubectlOneTime += time.Since(began)

		b.StopTimer()
		for _, e := range []*testbed.Env{envL, envK, envK1} {
			_ = e.Stop()
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(labctlTime.Milliseconds())/n, "labctl-ms/op")
	b.ReportMetric(float64(kubectlTime.Milliseconds())/n, "kubectl-per-file-ms/op")
	b.ReportMetric(float64(kubectlOneTime.Milliseconds())/n, "kubectl-one-call-ms/op")
	b.ReportMetric(labctlTime.Seconds()/kubectlTime.Seconds(), "labctl/kubectl")
	b.ReportMetric(labctlTime.Seconds()/kubectlOneTime.Seconds(), "labctl/kubectl-one-call")
}

func kubectlRun(b *testing.B, bin, home string, args ...string) (string, error) {
	b.Helper()
	cmd := exec.CommandContext(b.Context(), bin, args...)
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
