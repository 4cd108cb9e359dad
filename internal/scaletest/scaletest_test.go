package scaletest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
)

// bed is the two test-bed API servers: management (with the CAPI CRDs)
// and workload, with lab1's MachineDeployment and kubeconfig secret.
type bed struct {
	mgmt, wl *testbed.Env
	kc       kubernetes.Interface
	dc       dynamic.Interface
	// wlConfig is the workload REST config read back from the
	// lab1-kubeconfig secret, as the command does.
	wlConfig *rest.Config
}

func startBed(t testing.TB) *bed {
	t.Helper()
	b := &bed{mgmt: testbed.Start(t, testbed.WithCRDs("capi", "capmox")), wl: testbed.Start(t)}
	ctx := context.Background()
	b.kc = kubernetes.NewForConfigOrDie(b.wl.Config)
	b.dc = dynamic.NewForConfigOrDie(b.mgmt.Config)
	mk := kubernetes.NewForConfigOrDie(b.mgmt.Config)
	if _, err := mk.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(b.wl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "lab1-kubeconfig"}, Data: map[string][]byte{"value": raw}}
	if _, err := mk.CoreV1().Secrets(testNS).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	md := &unstructured.Unstructured{}
	md.SetAPIVersion("cluster.x-k8s.io/v1beta2")
	md.SetKind("MachineDeployment")
	md.SetNamespace(testNS)
	md.SetName(testMD)
	_ = unstructured.SetNestedField(md.Object, "lab1", "spec", "clusterName")
	_ = unstructured.SetNestedField(md.Object, int64(1), "spec", "replicas")
	_ = unstructured.SetNestedStringMap(md.Object, map[string]string{DeploymentNameLabel: testMD}, "spec", "selector", "matchLabels")
	_ = unstructured.SetNestedStringMap(md.Object, map[string]string{DeploymentNameLabel: testMD}, "spec", "template", "metadata", "labels")
	_ = unstructured.SetNestedField(md.Object, "lab1", "spec", "template", "spec", "clusterName")
	_ = unstructured.SetNestedMap(md.Object, map[string]any{"configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "lab1-workers"}}, "spec", "template", "spec", "bootstrap")
	_ = unstructured.SetNestedMap(md.Object, map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ProxmoxMachineTemplate", "name": "lab1-worker-2g"}, "spec", "template", "spec", "infrastructureRef")
	if _, err := b.dc.Resource(mdGVR).Namespace(testNS).Create(ctx, md, metav1.CreateOptions{}); err != nil {
		t.Fatalf("MachineDeployment: %v", err)
	}
	// The workload kubeconfig comes from the secret, through the same
	// function the command uses.
	kc, err := cluster.Kubeconfig(ctx, cluster.Options{Mgmt: kube.NewForConfig(b.mgmt.Config, b.mgmt.Kubeconfig), Name: "lab1"})
	if err != nil {
		t.Fatal(err)
	}
	if b.wlConfig, err = clientcmd.RESTConfigFromKubeConfig(kc); err != nil {
		t.Fatal(err)
	}
	return b
}

func testConfig(up, down, zero string) config.ScaleTest {
	return config.ScaleTest{
		Workload: config.ScaleWorkload{Image: config.DefaultInflateImage, CPU: "1500m", Memory: "512Mi"},
		Timeouts: config.ScaleTimeouts{ScaleUp: up, ScaleDown: down, FromZero: zero},
	}
}

func (b *bed) options(io *ui.IO, scenario string, c config.ScaleTest, chart string) Options {
	return Options{IO: io, Cluster: "lab1", Config: c, Scenario: scenario, Mgmt: b.mgmt.Config, Workload: b.wlConfig,
		MgmtNamespace: testNS, MachineDeployment: testMD, Chart: chart}
}

func testIO() (*ui.IO, *bytes.Buffer, *bytes.Buffer) {
	io, _, out, errb := ui.Test()
	return io, out, errb
}

// inflateLeft lists inflate pods still in the workload cluster.
func (b *bed) inflateLeft(t *testing.T) int {
	t.Helper()
	l, err := b.kc.CoreV1().Pods(Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: AppLabel + "=" + AppName})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// reset puts the clusters back at one running worker, MD at 1.
func (b *bed) reset(t *testing.T, a *standIn) string {
	t.Helper()
	ctx := context.Background()
	ms, err := b.dc.Resource(machineGVR).Namespace(testNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Items {
		_, _ = b.dc.Resource(machineGVR).Namespace(testNS).Patch(ctx, m.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = b.dc.Resource(machineGVR).Namespace(testNS).Delete(ctx, m.GetName(), metav1.DeleteOptions{})
	}
	if err := b.kc.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	// Stand-in namespace controller: finish deleting the namespace an
	// earlier run removed (no controller-manager runs on the test bed).
	if ns, err := b.kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); err == nil && ns.DeletionTimestamp != nil {
		ns.Spec.Finalizers = nil
		if _, err := b.kc.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("stand-in namespace controller: %v", err)
		}
	}
	if err := a.setMD(ctx, 1); err != nil {
		t.Fatal(err)
	}
	first, err := a.addWorker(ctx)
	if err != nil {
		t.Fatalf("stand-in worker: %v", err)
	}
	return first
}

func TestScaleTest(t *testing.T) {
	b := startBed(t)
	ctx := context.Background()

	t.Run("all phases match the stand-in's script", func(t *testing.T) {
		a := &standIn{t: t, kc: b.kc, dc: b.dc, s: realistic}
		first := b.reset(t, a)
		actx, stop := context.WithCancel(ctx)
		defer stop()
		actorErr := make(chan error, 1)
		go func() { actorErr <- a.playAll(actx, first) }()

		io, out, errb := testIO()
		chart := filepath.Join(t.TempDir(), "lab1.png")
		rep, err := Run(ctx, b.options(io, "all", testConfig("1m", "1m", "1m"), chart))
		stop()
		if aerr := <-actorErr; aerr != nil {
			t.Fatalf("stand-in actor: %v", aerr)
		}
		if err != nil {
			t.Fatalf("Run: %v\nprogress:\n%s", err, errb)
		}
		if !rep.Pass || len(rep.Phases) != 3 {
			t.Fatalf("report: pass %v, %d phases", rep.Pass, len(rep.Phases))
		}
		did := a.phases()
		if len(did) != 3 {
			t.Fatalf("stand-in played %d phases, want 3", len(did))
		}
		for i, p := range rep.Phases {
			if !p.Pass {
				t.Errorf("%s failed: %s", p.Name, p.Stopped)
			}
			for _, m := range p.Milestones {
				want, scripted := did[i][m.Name]
				if !scripted {
					if !m.Reached {
						t.Errorf("%s: milestone %s not reached", p.Name, m.Name)
					}
					continue
				}
				if !m.Reached {
					t.Errorf("%s: %s not recorded; the stand-in did it at %s", p.Name, m.Name, want.Format(time.StampMilli))
					continue
				}
				if d := m.Time.Sub(want); math.Abs(d.Seconds()) > 1 {
					t.Errorf("%s: %s recorded %s after the stand-in did it, want within 1s", p.Name, m.Name, d)
				}
				t.Logf("%s: %-36s +%5.2fs (stand-in → labctl %s)", p.Name, m.Name, m.AfterSeconds, m.Time.Sub(want).Round(time.Millisecond))
			}
		}
		// The scripted delays add up to each phase's total.
		wantUp := realistic.decide + realistic.create + realistic.provision + realistic.register + realistic.ready + realistic.run
		if got := rep.Phases[0].TotalSeconds; math.Abs(got-wantUp.Seconds()) > 1 {
			t.Errorf("scale-up took %.2fs, script says about %s", got, wantUp)
		}
		if b.inflateLeft(t) != 0 {
			t.Error("inflate pods left behind")
		}
		// The chart is a real PNG.
		f, err := os.Open(chart)
		if err != nil {
			t.Fatalf("chart: %v", err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatalf("chart is not a PNG: %v", err)
		}
		if r := img.Bounds(); r.Dx() < 100 || r.Dy() < 50 {
			t.Errorf("chart is %v", r)
		}
		// The text report, and the same report as JSON.
		if err := io.Print("text", rep, Text(io, rep)); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"PHASE", PhaseUp, PhaseDown, PhaseFromZero, "pass", "no Machine", MachineProvisioned, "chart: " + chart} {
			if want == "no Machine" {
				if strings.Contains(out.String(), want) {
					t.Errorf("a passing report says %q", want)
				}
				continue
			}
			if !strings.Contains(out.String(), want) {
				t.Errorf("text report lacks %q:\n%s", want, out)
			}
		}
		out.Reset()
		if err := io.Print("json", rep, nil); err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := json.Unmarshal(out.Bytes(), &back); err != nil {
			t.Fatalf("-o json is not valid JSON: %v", err)
		}
		if len(back.Phases) != 3 || back.Phases[0].Milestones[1].Name != MDScaledUp || len(back.Samples) == 0 {
			t.Errorf("JSON report lost data: %+v", back.Phases)
		}
		if !strings.Contains(errb.String(), PhaseUp) {
			t.Errorf("no live progress for %s:\n%s", PhaseUp, errb)
		}
	})

	t.Run("no Machine after the MachineDeployment went to 3", func(t *testing.T) {
		s := realistic
		s.noMachines = true
		a := &standIn{t: t, kc: b.kc, dc: b.dc, s: s}
		first := b.reset(t, a)
		actx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { _ = a.playAll(actx, first) }()
		io, _, _ := testIO()
		chart := filepath.Join(t.TempDir(), "lab1.svg")
		rep, err := Run(ctx, b.options(io, "up", testConfig("6s", "1m", "1m"), chart))
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("Run: %v, want a failed phase", err)
		}
		const want = "no Machine was created after the MachineDeployment went to 3: check the infrastructure provider"
		if !strings.Contains(err.Error(), want) || rep.Pass || rep.Phases[0].Stopped != want {
			t.Errorf("error %q, stopped %q; want %q", err, rep.Phases[0].Stopped, want)
		}
		if b.inflateLeft(t) != 0 {
			t.Error("inflate pods left behind after a failed phase")
		}
		svg, err := os.ReadFile(chart)
		if err != nil || !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("SVG chart: %v", err)
		}
	})

	t.Run("interrupted mid-phase leaves no inflate workload", func(t *testing.T) {
		s := realistic
		s.noMachines = true
		a := &standIn{t: t, kc: b.kc, dc: b.dc, s: s}
		first := b.reset(t, a)
		actx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { _ = a.playAll(actx, first) }()
		rctx, interrupt := context.WithCancel(ctx)
		// Ctrl-C once the scale-up phase has its 3 pods.
		go func() {
			if _, ok := a.waitPods(rctx, func(p []corev1.Pod) bool { return len(p) == UpPods(1) }); ok {
				interrupt()
			}
		}()
		io, _, _ := testIO()
		_, err := Run(rctx, b.options(io, "up", testConfig("1m", "1m", "1m"), ""))
		interrupt()
		if err == nil || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("Run: %v, want interrupted", err)
		}
		if n := b.inflateLeft(t); n != 0 {
			t.Errorf("%d inflate pods left behind after Ctrl-C", n)
		}
		ns, err := b.kc.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		if err == nil && ns.DeletionTimestamp == nil {
			t.Errorf("namespace %s labctl created was left behind", Namespace)
		}
	})
}
