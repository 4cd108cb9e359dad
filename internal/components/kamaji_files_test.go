package components_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

var updateKamaji = flag.Bool("update-kamaji", false, "rewrite the Kamaji files in embedded/upstream from their upstream sources")

// kamajiProvider is the Kamaji control-plane provider's module at labctl's
// pin; it is served, so go mod download finds it.
var kamajiProvider = upstream.Provider{Name: "kamaji-control-plane", Module: "github.com/clastix/cluster-api-control-plane-provider-kamaji",
	Pin: func(p versions.Pins) string { return p.KamajiControlPlane }}

// The Kamaji files labctl carries are the upstream ones at the pins: a pin
// bumped without them, or a file changed by hand, must not get through.
// 'go test ./internal/components -run TestKamajiFilesAreCurrent
// -update-kamaji' rewrites them.
func TestKamajiFilesAreCurrent(t *testing.T) {
	pins := versions.MustGet()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}

	// The provider's release assets: the components its Makefile's
	// release target builds with kustomize from config/default (the
	// manager image set to the release's), which the module also carries
	// as config/control-plane-components.yaml, and its metadata.yaml.
	t.Run("provider", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		m, err := upstream.Locate(ctx, root, kamajiProvider)
		if err != nil {
			t.Fatal(err)
		}
		comps, err := os.ReadFile(filepath.Join(m.Dir, "config", "control-plane-components.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		meta, err := os.ReadFile(filepath.Join(m.Dir, "config", "metadata.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		built, err := upstream.Kustomize(filepath.Join(m.Dir, "config", "default"))
		if err != nil {
			t.Fatal(err)
		}
		checkSameObjects(t, "kustomize build config/default", built, "config/control-plane-components.yaml", comps)
		image := "image: docker.io/clastix/cluster-api-control-plane-provider-kamaji:" + pins.KamajiControlPlane + "\n"
		if !strings.Contains(string(comps), image) {
			t.Errorf("the provider's components do not run %q", strings.TrimSpace(image))
		}

		cf, mf := components.KamajiProviderFiles(pins)
		if *updateKamaji {
			var gz bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
			_, _ = zw.Write(comps)
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			writeEmbedded(t, root, cf, gz.Bytes())
			writeEmbedded(t, root, mf, meta)
			return
		}
		have, err := embedded.FS.ReadFile(cf)
		if err != nil {
			t.Fatalf("%v: run this test with -update-kamaji", err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(have))
		if err != nil {
			t.Fatal(err)
		}
		have, err = io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, comps) {
			t.Errorf("embedded/%s is not %s's config/control-plane-components.yaml at %s: run this test with -update-kamaji", cf, m.Path, m.Version)
		}
		if have, err := embedded.FS.ReadFile(mf); err != nil || !bytes.Equal(have, meta) {
			t.Errorf("embedded/%s is not %s's config/metadata.yaml at %s (%v): run this test with -update-kamaji", mf, m.Path, m.Version, err)
		}
	})

	// Kamaji's chart, packaged from the source of the pinned commit.
	t.Run("chart", func(t *testing.T) {
		src := testbed.UpstreamSource(t, "kamaji-"+pins.Kamaji.Commit[:7])
		if up, err := os.ReadFile(filepath.Join(src, "UPSTREAM")); err == nil && !strings.Contains(string(up), pins.Kamaji.Commit) {
			t.Fatalf("%s is not Kamaji at %s: its UPSTREAM says %s", src, pins.Kamaji.Commit, up)
		}
		want, err := packageKamajiChart(filepath.Join(src, "charts", "kamaji"), pins)
		if err != nil {
			t.Fatal(err)
		}
		file := components.KamajiChartFile(pins)
		if *updateKamaji {
			writeChart(t, root, file, want)
			return
		}
		data, err := embedded.FS.ReadFile(file)
		if err != nil {
			t.Fatalf("%v: run this test with -update-kamaji", err)
		}
		have, err := loader.LoadArchive(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		sameChart(t, "embedded/"+file, have, "the packaged source", want, "-update-kamaji")
	})
}

// sameChart fails unless chart have (named haveName) holds what want
// (wantName) holds, naming each file that differs and the flag that
// rewrites have.
func sameChart(t *testing.T, haveName string, have *chart.Chart, wantName string, want *chart.Chart, update string) {
	t.Helper()
	h, w := chartFiles(t, have), chartFiles(t, want)
	if reflect.DeepEqual(h, w) {
		return
	}
	for name := range w {
		if h[name] != w[name] {
			t.Errorf("%s: %s differs from %s", haveName, name, wantName)
		}
	}
	for name := range h {
		if _, ok := w[name]; !ok {
			t.Errorf("%s: %s is not in %s", haveName, name, wantName)
		}
	}
	t.Errorf("run this test with %s", update)
}

// chartFiles is a chart's content by file name.
func chartFiles(t *testing.T, ch *chart.Chart) map[string]string {
	t.Helper()
	meta, err := yaml.Marshal(ch.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{"Chart.yaml": string(meta)}
	for _, f := range append(append([]*chart.File{}, ch.Templates...), ch.Files...) {
		out[f.Name] = string(f.Data)
	}
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			out[f.Name] = string(f.Data)
		}
	}
	if len(ch.Dependencies()) > 0 || ch.Lock != nil {
		out["dependencies"] = "present"
	}
	return out
}

// writeChart packages ch as embedded/<name>.
func writeChart(t *testing.T, root, name string, ch *chart.Chart) {
	t.Helper()
	out, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	writeEmbedded(t, root, name, data)
}

func writeEmbedded(t *testing.T, root, name string, data []byte) {
	t.Helper()
	p := filepath.Join(root, "embedded", filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", p, len(data))
}

// checkSameObjects: two YAML streams hold the same objects (in any order:
// kustomize versions order kinds differently).
func checkSameObjects(t *testing.T, aName string, a []byte, bName string, b []byte) {
	t.Helper()
	byKey := func(name string, data []byte) map[string]map[string]any {
		objs, err := upstream.Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out := map[string]map[string]any{}
		for _, o := range objs {
			out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = o.Object
		}
		return out
	}
	ao, bo := byKey(aName, a), byKey(bName, b)
	var keys []string
	for k := range ao {
		keys = append(keys, k)
	}
	for k := range bo {
		if _, ok := ao[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch x, y := ao[k], bo[k]; {
		case x == nil:
			t.Errorf("%s lacks %s, which %s has", aName, k, bName)
		case y == nil:
			t.Errorf("%s lacks %s, which %s has", bName, k, aName)
		case !reflect.DeepEqual(x, y):
			t.Errorf("%s and %s differ at %s", aName, bName, k)
		}
	}
}

// packageKamajiChart is Kamaji's chart folder as labctl ships it, the way
// an edge release would package it: version and appVersion set to the
// release tag (the image tag defaults to the appVersion), and the
// kamaji-etcd dependency dropped, as labctl installs the datastore as a
// release of its own at its own pin (the dependency asks for any version
// >= 0.11.0 from a repository, which 'helm install' would fetch).
func packageKamajiChart(dir string, pins versions.Pins) (*chart.Chart, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = pins.Kamaji.Version, pins.Kamaji.Version
	ch.Metadata.Dependencies, ch.Lock = nil, nil
	ch.SetDependencies()
	var raw []*chart.File
	for _, f := range ch.Raw {
		if f.Name != "Chart.lock" {
			raw = append(raw, f)
		}
	}
	ch.Raw = raw
	return ch, nil
}
