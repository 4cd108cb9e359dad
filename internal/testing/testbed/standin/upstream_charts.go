package standin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/repo"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

// UpstreamChart packages the REAL chart name (CertManager,
// ClusterAPIOperator or Cilium) from its module at labctl's pin into dir,
// as the project's release makes it, and returns the archive's path:
//
//   - cilium: install/kubernetes/cilium of github.com/cilium/cilium, the
//     archive labctl carries (components.CiliumChart);
//   - cert-manager: deploy/charts/cert-manager of
//     github.com/cert-manager/cert-manager, with version and appVersion set
//     to the release tag (its Chart.yaml says "set automatically by the
//     release tool"; the images default to the appVersion);
//   - cluster-api-operator: hack/charts/cluster-api-operator of
//     sigs.k8s.io/cluster-api-operator plus templates/operator-components.yaml
//     built by kustomize from config/chart, the manager image set to the
//     released one, version and appVersion the tag without "v" (the
//     Makefile's release-chart, chart-manifest-modification and
//     HELM_CHART_TAG).
func UpstreamChart(t testing.TB, dir, name string) string {
	t.Helper()
	path, err := upstreamChart(dir, name)
	if err != nil {
		t.Fatalf("packaging the real %s chart: %v", name, err)
	}
	return path
}

func upstreamChart(dir, name string) (string, error) {
	root, err := testbed.ModuleRoot()
	if err != nil {
		return "", err
	}
	pins, err := versions.Get()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ch *chart.Chart
	switch name {
	case CertManager:
		m, err := upstream.Locate(ctx, root, upstream.Provider{Name: "cert-manager", Module: "github.com/cert-manager/cert-manager",
			Pin: func(p versions.Pins) string { return p.CertManager }})
		if err != nil {
			return "", err
		}
		if ch, err = loader.LoadDir(filepath.Join(m.Dir, "deploy", "charts", "cert-manager")); err != nil {
			return "", err
		}
		ch.Metadata.Version, ch.Metadata.AppVersion = pins.CertManagerChartVersion(), pins.CertManager
	case ClusterAPIOperator:
		p := upstream.Providers["cluster-api-operator"]
		m, err := upstream.Locate(ctx, root, p)
		if err != nil {
			return "", err
		}
		if ch, err = loader.LoadDir(filepath.Join(m.Dir, "hack", "charts", "cluster-api-operator")); err != nil {
			return "", err
		}
		comps, err := upstream.Kustomize(filepath.Join(m.Dir, "config", "chart"))
		if err != nil {
			return "", err
		}
		ch.Templates = append(ch.Templates, &chart.File{Name: "templates/operator-components.yaml", Data: comps})
		for _, f := range ch.Raw {
			if f.Name != chartutil.ValuesfileName {
				continue
			}
			v := string(f.Data)
			for _, r := range [][2]string{
				{"repository: gcr.io/k8s-staging-capi-operator/cluster-api-operator", "repository: " + p.Image},
				{"tag: dev", "tag: " + m.Version},
			} {
				if !strings.Contains(v, r[0]) {
					return "", fmt.Errorf("the operator chart's values.yaml has no %q to set as its release does", r[0])
				}
				v = strings.Replace(v, r[0], r[1], 1)
			}
			f.Data = []byte(v)
		}
		ch.Metadata.Version = pins.ClusterAPIOperatorChartVersion()
		ch.Metadata.AppVersion = ch.Metadata.Version
	case Cilium:
		// The archive labctl carries, which TestCiliumChartIsCurrent
		// (internal/components) holds to Cilium's module at the pin.
		data, err := components.CiliumChart(pins)
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, Cilium+"-"+pins.Cilium+".tgz")
		return path, os.WriteFile(path, data, 0o644)
	default:
		return "", fmt.Errorf("no real chart %q (known: %s, %s, %s)", name, CertManager, ClusterAPIOperator, Cilium)
	}
	return chartutil.Save(ch, dir)
}

// ServeUpstreamRepo serves a chart repository on 127.0.0.1 holding the
// REAL cert-manager and cluster-api-operator charts at the pinned
// versions (UpstreamChart), and stops it when the test ends.
func ServeUpstreamRepo(t testing.TB) *Repo {
	t.Helper()
	dir := t.TempDir()
	UpstreamChart(t, dir, CertManager)
	UpstreamChart(t, dir, ClusterAPIOperator)
	return serveDir(t, dir)
}

// serveDir serves the chart archives in dir as a repository.
func serveDir(t testing.TB, dir string) *Repo {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var downloads atomic.Int64
	files := http.FileServer(http.Dir(dir))
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".tgz") {
			downloads.Add(1)
		}
		files.ServeHTTP(w, r)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	idx, err := repo.IndexDirectory(dir, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := idx.WriteFile(filepath.Join(dir, "index.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Repo{URL: srv.URL, Dir: dir, Requests: func() int { return int(downloads.Load()) }}
}

// offlineProviders are the providers labctl installs, by the test bed's
// name, in clusterctl's overrides layout: <label>/<version>/.
var offlineProviders = []struct{ name, label string }{
	{"cluster-api", "cluster-api"},
	{"kubeadm-bootstrap", "bootstrap-kubeadm"},
	{"kubeadm-control-plane", "control-plane-kubeadm"},
	{"capmox", "infrastructure-proxmox"},
	{"ipam-in-cluster", "ipam-in-cluster"},
}

// UpstreamOffline makes the folder 'labctl mgmt install --offline-dir'
// reads, from the REAL upstream parts: the two charts (UpstreamChart), the
// kamaji-etcd chart from its source, and
// each provider's release assets (upstream.ReleaseOf: <type>-components.yaml
// and metadata.yaml) under <label>/<labctl's pin>/. Where the test bed
// runs another version than the pin (upstream.TestbedVersions: Cluster
// API v1.12.10 for the pinned v1.12.11), that version's assets stand
// under the pin's name.
func UpstreamOffline(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	UpstreamChart(t, dir, CertManager)
	UpstreamChart(t, dir, ClusterAPIOperator)
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pins := versions.MustGet()
	// The kamaji-etcd chart, which labctl fetches (a tenant lab's
	// datastore), packaged from its source as its release does: its
	// Chart.yaml carries the version.
	src := testbed.UpstreamSource(t, "kamaji-etcd-v"+pins.KamajiEtcd.Chart)
	ch, err := loader.LoadDir(filepath.Join(src, "charts", "kamaji-etcd"))
	if err != nil {
		t.Fatalf("offline folder: %v", err)
	}
	if ch.Metadata.Version != pins.KamajiEtcd.Chart {
		t.Fatalf("offline folder: %s is kamaji-etcd %s, not the pinned %s", src, ch.Metadata.Version, pins.KamajiEtcd.Chart)
	}
	if _, err := chartutil.Save(ch, dir); err != nil {
		t.Fatalf("offline folder: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, p := range offlineProviders {
		rel, err := upstream.ReleaseOf(ctx, root, p.name)
		if err != nil {
			t.Fatalf("offline folder: %v", err)
		}
		d := filepath.Join(dir, p.label, rel.Provider.Pin(pins))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for file, data := range map[string][]byte{rel.Provider.Type + "-components.yaml": rel.Components, "metadata.yaml": rel.Metadata} {
			if err := os.WriteFile(filepath.Join(d, file), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}
