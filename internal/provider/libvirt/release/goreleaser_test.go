package release_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

// goreleaser is the part of .goreleaser.yaml the image depends on, with
// goreleaser v2.15.1's field names (pkg/config/config.go: Build, DockerV2).
type goreleaser struct {
	Builds []struct {
		ID      string   `json:"id"`
		Binary  string   `json:"binary"`
		Tags    []string `json:"tags"`
		Env     []string `json:"env"`
		Goos    []string `json:"goos"`
		Goarch  []string `json:"goarch"`
		Ldflags []string `json:"ldflags"`
	} `json:"builds"`
	DockersV2 []struct {
		IDs        []string          `json:"ids"`
		Dockerfile string            `json:"dockerfile"`
		Images     []string          `json:"images"`
		Tags       []string          `json:"tags"`
		Platforms  []string          `json:"platforms"`
		BuildArgs  map[string]string `json:"build_args"`
	} `json:"dockers_v2"`
}

// render applies a goreleaser template as goreleaser would for a release
// of git tag v<version>: goreleaser's .Version is the tag without its "v".
func render(t *testing.T, tpl, version string) string {
	t.Helper()
	tp, err := template.New("goreleaser").Parse(tpl)
	if err != nil {
		t.Fatalf("template %q: %v", tpl, err)
	}
	var b bytes.Buffer
	if err := tp.Execute(&b, map[string]string{"Version": version}); err != nil {
		t.Fatalf("template %q: %v", tpl, err)
	}
	return b.String()
}

// .goreleaser.yaml builds the image mgmt install names, and
// embedded/versions.yaml pins: the same repository, base image and
// platforms; a tag that is the version the released binary reports
// (so release.Version keeps it, and the rendered Deployment runs that
// tag); the one static binary (CGO_ENABLED=0) built for each platform,
// copied by the Dockerfile as its entrypoint.
func TestGoreleaserBuildsThePinnedImage(t *testing.T) {
	root, err := testbed.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var g goreleaser
	if err := yaml.Unmarshal(raw, &g); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	pin := versions.MustGet().LibvirtProvider
	if len(g.DockersV2) != 1 {
		t.Fatalf(".goreleaser.yaml has %d dockers_v2 entries, want the provider's one", len(g.DockersV2))
	}
	d := g.DockersV2[0]
	if !slices.Equal(d.Images, []string{pin.Repository}) {
		t.Errorf("goreleaser images %v, versions.yaml libvirtProvider.repository %s", d.Images, pin.Repository)
	}
	if !slices.Equal(d.Platforms, pin.Platforms) {
		t.Errorf("goreleaser platforms %v, versions.yaml libvirtProvider.platforms %v", d.Platforms, pin.Platforms)
	}
	if d.BuildArgs["BASE_IMAGE"] != pin.BaseImage {
		t.Errorf("goreleaser build_args.BASE_IMAGE %q, versions.yaml libvirtProvider.baseImage %q", d.BuildArgs["BASE_IMAGE"], pin.BaseImage)
	}

	// The tag rule: the image of a release is tagged with the version its
	// binary carries, which is the provider's version and so the tag the
	// rendered Deployment names.
	if len(d.Tags) != 1 || len(d.IDs) != 1 {
		t.Fatalf("goreleaser dockers_v2 tags %v, ids %v: want one each", d.Tags, d.IDs)
	}
	var binary, versionFlag string
	for _, b := range g.Builds {
		if b.ID != d.IDs[0] {
			continue
		}
		binary = b.Binary
		if !slices.Contains(b.Tags, "provider") {
			t.Errorf("build %s tags %v: the image's binary runs 'labctl provider libvirt', which only -tags provider builds in (cmd/provider.go)", b.ID, b.Tags)
		}
		if !slices.Contains(b.Env, "CGO_ENABLED=0") {
			t.Errorf("build %s env %v: the image's binary must be static (CGO_ENABLED=0)", b.ID, b.Env)
		}
		for _, p := range pin.Platforms {
			goos, goarch, _ := strings.Cut(p, "/")
			if !slices.Contains(b.Goos, goos) || !slices.Contains(b.Goarch, goarch) {
				t.Errorf("build %s (goos %v, goarch %v) does not build %s", b.ID, b.Goos, b.Goarch, p)
			}
		}
		for _, l := range b.Ldflags {
			if m := regexp.MustCompile(`-X github.com/labctl/labctl/internal/versions.Version=(.+)$`).FindStringSubmatch(l); m != nil {
				versionFlag = m[1]
			}
		}
	}
	if binary == "" || versionFlag == "" {
		t.Fatalf("no build %v with a binary and -X ...versions.Version in .goreleaser.yaml", d.IDs)
	}
	for _, v := range []string{"0.1.0", "1.12.3", "2.0.0-rc.1"} {
		tag, labctl := render(t, d.Tags[0], v), render(t, versionFlag, v)
		if tag != labctl {
			t.Errorf("release %s: image tag %q, but the binary reports version %q", v, tag, labctl)
		}
		pv := release.Version(labctl)
		if pv != tag {
			t.Errorf("release %s: the binary installs provider %q, not its image's tag %q", v, pv, tag)
		}
		comps, err := release.Components(release.Image(pin, pv), pin.Platforms)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decode(t, comps) {
			if o.GetKind() != "Deployment" {
				continue
			}
			dep := deployment(t, o)
			if img := dep.Spec.Template.Spec.Containers[0].Image; img != d.Images[0]+":"+tag {
				t.Errorf("release %s: the Deployment runs %s, goreleaser pushes %s:%s", v, img, d.Images[0], tag)
			}
			var want []string
			for _, p := range d.Platforms {
				want = append(want, strings.SplitN(p, "/", 2)[1])
			}
			if _, arches := affinity(t, dep); !slices.Equal(arches, want) {
				t.Errorf("the Deployment runs on arch %v, goreleaser builds %v", arches, want)
			}
		}
	}

	// The Dockerfile starts from the base image goreleaser passes and runs
	// the binary goreleaser puts at $TARGETPLATFORM/<binary>.
	df, err := os.ReadFile(filepath.Join(root, d.Dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ARG BASE_IMAGE\n", "FROM ${BASE_IMAGE}\n", "ARG TARGETPLATFORM\n",
		"COPY ${TARGETPLATFORM}/" + binary + " /" + binary + "\n", `ENTRYPOINT ["/` + binary + `"]`} {
		if !strings.Contains(string(df), want) {
			t.Errorf("%s lacks %q", d.Dockerfile, want)
		}
	}
}
