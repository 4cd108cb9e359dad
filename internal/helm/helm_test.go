package helm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/versions"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// counting returns a copy of cfg that counts its write requests.
func counting(cfg *rest.Config) (*rest.Config, *atomic.Int64) {
	var n atomic.Int64
	c := rest.CopyConfig(cfg)
	c.WrapTransport = testbed.CountWrites(&n)
	return c, &n
}

func certManager(repoURL string) helm.Release {
	return helm.Release{
		Name: "cert-manager", Namespace: "cert-manager",
		Chart:  helm.Chart{Name: "cert-manager", Version: versions.MustGet().CertManagerChartVersion(), Repo: repoURL},
		Values: map[string]any{"crds": map[string]any{"enabled": true, "keep": true}},
	}
}

func TestStandInCertManagerChartFromLoopbackRepo(t *testing.T) {
	env := testbed.Start(t)
	repo := standin.ServeRepo(t, standin.Package(t, t.TempDir(), standin.CertManager, "v1.21.3"))
	cfg, writes := counting(env.Config)
	hc := helm.New(cfg)
	rel := certManager(repo.URL)

	todo, err := hc.Plan(ctx(t), rel)
	if err != nil || todo != "install Helm release cert-manager/cert-manager (chart cert-manager v1.21.2)" {
		t.Fatalf("plan on an empty cluster = %q, %v", todo, err)
	}
	did, err := hc.Ensure(ctx(t), rel, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if did != todo {
		t.Errorf("Ensure did %q, planned %q", did, todo)
	}
	kc := kube.NewForConfig(env.Config, env.Kubeconfig)
	for _, name := range []string{"cert-manager", "cert-manager-cainjector", "cert-manager-webhook"} {
		if _, found, err := kc.Get(ctx(t), kube.Ref{GVK: kube.DeploymentGVK, Namespace: "cert-manager", Name: name}); err != nil || !found {
			t.Errorf("Deployment cert-manager/%s after install: found %v, %v", name, found, err)
		}
	}
	// The stand-in renders its CRD only with crds.enabled: labctl's values arrived.
	if d, err := kc.CRD(ctx(t), "certificates.cert-manager.io"); err != nil || !d.Found {
		t.Errorf("the chart's CRD is missing, so the values did not reach the chart: %+v %v", d, err)
	}
	st, err := hc.State(ctx(t), "cert-manager", "cert-manager")
	if err != nil || st.Status != release.StatusDeployed || st.ChartVersion != "v1.21.2" || !st.Deployed {
		t.Errorf("state = %+v, %v", st, err)
	}

	t.Run("second run writes nothing", func(t *testing.T) {
		before, downloads := writes.Load(), repo.Requests()
		did, err := hc.Ensure(ctx(t), rel, time.Minute)
		if err != nil || did != "" {
			t.Fatalf("Ensure = %q, %v; want nothing to do", did, err)
		}
		if n := writes.Load() - before; n != 0 {
			t.Errorf("a no-op Ensure made %d write requests", n)
		}
		if repo.Requests() != downloads {
			t.Errorf("a no-op Ensure downloaded the chart")
		}
	})

	t.Run("changed values upgrade", func(t *testing.T) {
		r := certManager(repo.URL)
		r.Values["crds"].(map[string]any)["keep"] = false
		todo, _ := hc.Plan(ctx(t), r)
		if !strings.Contains(todo, "its values changed") {
			t.Errorf("plan = %q", todo)
		}
		if _, err := hc.Ensure(ctx(t), r, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := hc.Ensure(ctx(t), rel, time.Minute); err != nil { // and back
			t.Fatal(err)
		}
	})

	t.Run("new pin upgrades", func(t *testing.T) {
		r := certManager(repo.URL)
		r.Chart.Version = "v1.21.3"
		did, err := hc.Ensure(ctx(t), r, time.Minute)
		if err != nil || did != "upgrade Helm release cert-manager/cert-manager from chart version v1.21.2 to v1.21.3" {
			t.Fatalf("Ensure = %q, %v", did, err)
		}
		st, _ := hc.State(ctx(t), "cert-manager", "cert-manager")
		if st.ChartVersion != "v1.21.3" || st.Status != release.StatusDeployed {
			t.Errorf("state after upgrade = %+v", st)
		}
	})

	t.Run("an interrupted run is taken over", func(t *testing.T) {
		// Leave the release as a labctl killed mid-upgrade would.
		cfg := new(action.Configuration)
		if err := cfg.Init(helm.RESTClientGetter(env.Config, "cert-manager"), "cert-manager", "secret", t.Logf); err != nil {
			t.Fatal(err)
		}
		last, err := cfg.Releases.Last("cert-manager")
		if err != nil {
			t.Fatal(err)
		}
		last.SetStatus(release.StatusPendingUpgrade, "labctl was interrupted")
		if err := cfg.Releases.Update(last); err != nil {
			t.Fatal(err)
		}
		todo, _ := hc.Plan(ctx(t), rel)
		if !strings.Contains(todo, "left pending-upgrade by an interrupted run") {
			t.Errorf("plan = %q", todo)
		}
		if _, err := hc.Ensure(ctx(t), rel, time.Minute); err != nil {
			t.Fatal(err)
		}
		st, _ := hc.State(ctx(t), "cert-manager", "cert-manager")
		if st.Status != release.StatusDeployed || st.ChartVersion != "v1.21.2" {
			t.Errorf("state = %+v", st)
		}
	})
}

func TestChartSourcesAndErrors(t *testing.T) {
	repo := standin.ServeRepo(t)
	hc := helm.New(&rest.Config{Host: "https://127.0.0.1:1"})
	pins := versions.MustGet()

	t.Run("repository", func(t *testing.T) {
		ch, err := hc.Load(ctx(t), helm.Chart{Name: "cluster-api-operator", Version: pins.ClusterAPIOperatorChartVersion(), Repo: repo.URL})
		if err != nil {
			t.Fatal(err)
		}
		if ch.Metadata.Version != "0.28.0" || !strings.Contains(ch.Metadata.Description, "stand-in") {
			t.Errorf("loaded %+v", ch.Metadata)
		}
	})
	t.Run("local file", func(t *testing.T) {
		file := filepath.Join(repo.Dir, "cert-manager-v1.21.2.tgz")
		if _, err := hc.Load(ctx(t), helm.Chart{Name: "cert-manager", Version: "v1.21.2", File: file}); err != nil {
			t.Fatal(err)
		}
		_, err := hc.Load(ctx(t), helm.Chart{Name: "cert-manager", Version: "v1.21.9", File: file})
		if err == nil || !strings.Contains(err.Error(), "the archive holds cert-manager v1.21.2") {
			t.Errorf("a file of another version: %v", err)
		}
	})
	t.Run("missing version", func(t *testing.T) {
		_, err := hc.Load(ctx(t), helm.Chart{Name: "cert-manager", Version: "v9.9.9", Repo: repo.URL})
		if err == nil || !strings.Contains(err.Error(), "has no version v9.9.9 of cert-manager") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("tampered archive", func(t *testing.T) {
		file := filepath.Join(repo.Dir, "cert-manager-v1.21.2.tgz")
		data, _ := os.ReadFile(file)
		if err := os.WriteFile(file, append(data, 0), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := hc.Load(ctx(t), helm.Chart{Name: "cert-manager", Version: "v1.21.2", Repo: repo.URL})
		if err == nil || !strings.Contains(err.Error(), "but the index says") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		_, err := hc.Load(ctx(t), helm.Chart{Name: "cert-manager", Version: "v1.21.2", Repo: "http://127.0.0.1:1/charts"})
		if err == nil || !strings.Contains(err.Error(), "fetching chart cert-manager v1.21.2: reading the repository index") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestRenderIncludesCRDs(t *testing.T) {
	repo := standin.ServeRepo(t)
	hc := helm.New(&rest.Config{Host: "https://127.0.0.1:1"})
	out, err := hc.Render(ctx(t), certManager(repo.URL), "v1.35.4")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kube.ParseObjects("render", out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, kube.RefOf(o).String())
	}
	got := strings.Join(names, ", ")
	for _, want := range []string{"CustomResourceDefinition certificates.cert-manager.io", "Deployment cert-manager/cert-manager-webhook"} {
		if !strings.Contains(got, want) {
			t.Errorf("render lacks %s: %s", want, got)
		}
	}
}
