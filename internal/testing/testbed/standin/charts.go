// Package standin holds the test bed's stand-ins for what cannot run here:
// small Helm charts standing in for cert-manager and cluster-api-operator,
// a chart repository serving them on loopback, and helpers that
// play the controllers (the deployment controller, cluster-api-operator, k3s's
// helm-controller) by writing the status they would write.
//
// Every stand-in says so: charts and objects carry labctl.dev/stand-in,
// and helpers log what they play.
package standin

import (
	"embed"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

//go:embed charts
var chartFiles embed.FS

// Chart names, as the pinned repositories call them.
const (
	CertManager        = "cert-manager"
	ClusterAPIOperator = "cluster-api-operator"
	// Cilium is the workload clusters' CNI. It has no stand-in: labctl
	// carries the real chart (UpstreamChart).
	Cilium = "cilium"
)

// Package writes the stand-in chart name at version into dir as
// <name>-<version>.tgz, as 'helm package' would, and returns its path.
// The operator stand-in carries the real operator CRDs, rendered from the
// operator's module (testbed.UpstreamCRDs), in its crds/ folder, which Helm installs when they are
// missing and leaves alone when the test bed already has them.
func Package(t testing.TB, dir, name, version string) string {
	t.Helper()
	var files []*loader.BufferedFile
	root := path.Join("charts", name)
	err := fs.WalkDir(chartFiles, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := chartFiles.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: strings.TrimPrefix(p, root+"/"), Data: data})
		return nil
	})
	if err != nil {
		t.Fatalf("stand-in chart %s: %v", name, err)
	}
	meta := "apiVersion: v2\nname: " + name + "\nversion: " + version + "\nappVersion: " + quote(version) +
		"\ndescription: labctl test stand-in for " + name + ", not the real chart\n"
	files = append(files, &loader.BufferedFile{Name: "Chart.yaml", Data: []byte(meta)})
	if name == ClusterAPIOperator {
		crds, err := testbed.UpstreamCRDs(ClusterAPIOperator)
		if err != nil {
			t.Fatalf("stand-in chart %s: %v", name, err)
		}
		for _, crd := range crds {
			data, err := yaml.Marshal(crd)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, &loader.BufferedFile{Name: "crds/" + crd.Name + ".yaml", Data: data})
		}
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		t.Fatalf("stand-in chart %s: %v", name, err)
	}
	out, err := chartutil.Save(ch, dir)
	if err != nil {
		t.Fatalf("stand-in chart %s: %v", name, err)
	}
	return out
}

func quote(s string) string { return `"` + s + `"` }

// Pinned packages both stand-in charts at the versions labctl pins into
// dir, and returns their paths by chart name.
func Pinned(t testing.TB, dir string) map[string]string {
	t.Helper()
	pins := versions.MustGet()
	return map[string]string{
		CertManager:        Package(t, dir, CertManager, pins.CertManagerChartVersion()),
		ClusterAPIOperator: Package(t, dir, ClusterAPIOperator, pins.ClusterAPIOperatorChartVersion()),
	}
}

// Repo is a chart repository served on loopback.
type Repo struct {
	URL string
	Dir string
	// Requests counts chart downloads (not index reads).
	Requests func() int
}

// ServeRepo serves a chart repository on 127.0.0.1 holding the stand-in
// charts at the pinned versions, plus any extra chart archives given, and
// stops it when the test ends.
func ServeRepo(t testing.TB, extra ...string) *Repo {
	t.Helper()
	dir := t.TempDir()
	Pinned(t, dir)
	for _, e := range extra {
		data, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(e)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return serveDir(t, dir)
}
