package components_test

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/labctl/labctl/internal/components"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

var updateCilium = flag.Bool("update-cilium", false, "rewrite embedded/upstream/cilium-<pin>.tgz from Cilium's module")

// ciliumModule is Cilium's source at labctl's pin; the proxy serves it,
// with its chart in install/kubernetes/cilium.
var ciliumModule = upstream.Provider{Name: "cilium", Module: "github.com/cilium/cilium",
	Pin: func(p versions.Pins) string { return "v" + p.Cilium }}

// The Cilium chart labctl carries is install/kubernetes/cilium of
// Cilium's module at the pin, as Cilium's release packages it: a pin
// bumped without it, or a file changed by hand, must not get through.
// 'go test ./internal/components -run TestCiliumChartIsCurrent
// -update-cilium' rewrites it.
func TestCiliumChartIsCurrent(t *testing.T) {
	pins := versions.MustGet()
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, err := upstream.Locate(ctx, root, ciliumModule)
	if err != nil {
		t.Fatal(err)
	}
	want, err := loader.LoadDir(filepath.Join(m.Dir, "install", "kubernetes", "cilium"))
	if err != nil {
		t.Fatal(err)
	}
	if want.Metadata.Name != "cilium" || want.Metadata.Version != pins.Cilium {
		t.Fatalf("%s@%s's chart is %s %s, want cilium %s", m.Path, m.Version, want.Metadata.Name, want.Metadata.Version, pins.Cilium)
	}
	file := components.CiliumChartFile(pins)
	if *updateCilium {
		writeChart(t, root, file, want)
		return
	}
	data, err := components.CiliumChart(pins)
	if err != nil {
		t.Fatalf("%v: run this test with -update-cilium", err)
	}
	have, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	sameChart(t, "embedded/"+file, have, m.Path+"@"+m.Version, want, "-update-cilium")
}
