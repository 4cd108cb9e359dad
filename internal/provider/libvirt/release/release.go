// Package release makes the libvirt provider's release assets, as every
// Cluster API provider publishes them and cluster-api-operator (or
// clusterctl) reads them: infrastructure-components.yaml (the namespace,
// the CRDs, the RBAC and the manager's Deployment) and metadata.yaml. They
// come from the binary itself (embedded/provider/libvirt), so labctl can
// hand them to the operator as its offline ConfigMap.
package release

import (
	"bytes"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/versions"
)

// Namespace is where the provider's manager runs.
const Namespace = "capi-libvirt-system"

// providerLabel is what clusterctl labels every object of a provider with.
const providerLabel = "cluster.x-k8s.io/provider"

// DevVersion is the provider's version from a labctl build that carries
// no release version (go build, go test: "dev"; make build without a tag:
// a commit hash): the operator needs a semantic version, and no release
// has this one.
const DevVersion = "v0.0.0-dev"

// Version is the provider's version for labctl's version lv: the same,
// since the provider is the labctl binary. It is the InfrastructureProvider's
// spec.version, the offline ConfigMap's version label and the image's tag,
// so it must be a semantic version with a "v" that is also a label value
// and an image tag; anything else (a development build) is DevVersion.
func Version(lv string) string {
	if _, err := version.ParseSemantic(lv); err != nil || !strings.HasPrefix(lv, "v") || len(validation.IsValidLabelValue(lv)) > 0 {
		return DevVersion
	}
	return lv
}

// Image is the manager's image at a version: the repository
// embedded/versions.yaml pins, tagged with the version.
func Image(pin versions.Image, version string) string {
	return pin.Repository + ":" + version
}

// Components is infrastructure-components.yaml with the manager's image,
// scheduled only on nodes of the platforms (os/arch) the image is built for.
func Components(image string, platforms []string) ([]byte, error) {
	if image == "" {
		return nil, fmt.Errorf("libvirt provider components: no image for the manager")
	}
	affinity, err := platformAffinity(platforms)
	if err != nil {
		return nil, err
	}
	docs := []string{"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + Namespace + "\n"}
	crds, err := fs.Glob(embedded.FS, "provider/libvirt/crds/*.yaml")
	if err != nil {
		return nil, err
	}
	slices.Sort(crds)
	for _, p := range append(append(crds, "provider/libvirt/rbac/role.yaml"), "provider/libvirt/manager.yaml") {
		raw, err := embedded.FS.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("libvirt provider components: %w", err)
		}
		docs = append(docs, splitDocs(raw)...)
	}
	var out bytes.Buffer
	for _, d := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			return nil, fmt.Errorf("libvirt provider components: %w", err)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
		}
		labels[providerLabel] = "infrastructure-libvirt"
		meta["labels"] = labels
		if obj["kind"] == "Deployment" {
			if err := setImage(obj, image, affinity); err != nil {
				return nil, err
			}
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return out.Bytes(), nil
}

func setImage(dep map[string]any, image string, affinity map[string]any) error {
	spec, _ := dep["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	containers, _ := pod["containers"].([]any)
	if len(containers) != 1 {
		return fmt.Errorf("libvirt provider components: embedded/provider/libvirt/manager.yaml's Deployment holds %d containers, want 1", len(containers))
	}
	c, _ := containers[0].(map[string]any)
	c["image"] = image
	pod["affinity"] = affinity
	return nil
}

// platformAffinity keeps the manager's pod on nodes whose os and arch
// (the kubelet's kubernetes.io/os and kubernetes.io/arch labels) the
// image is built for: elsewhere it could only fail to start.
func platformAffinity(platforms []string) (map[string]any, error) {
	var oses, arches []any
	for _, p := range platforms {
		os, arch, ok := strings.Cut(p, "/")
		if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("libvirt provider components: platform %q is not os/arch (embedded/versions.yaml libvirtProvider.platforms)", p)
		}
		if !slices.Contains(oses, any(os)) {
			oses = append(oses, os)
		}
		arches = append(arches, arch)
	}
	if len(platforms) == 0 {
		return nil, fmt.Errorf("libvirt provider components: no platforms (embedded/versions.yaml libvirtProvider.platforms)")
	}
	return map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{
			map[string]any{"key": "kubernetes.io/os", "operator": "In", "values": oses},
			map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": arches},
		}}},
	}}}, nil
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

func splitDocs(b []byte) []string {
	var out []string
	for _, d := range docSep.Split(string(b), -1) {
		if len(bytes.TrimSpace([]byte(d))) > 0 {
			out = append(out, d)
		}
	}
	return out
}

var semver = regexp.MustCompile(`^v(\d+)\.(\d+)\.\d+`)

// Metadata is metadata.yaml for a version: its release series on Cluster
// API contract v1beta2 (clusterctl's Metadata, v1alpha3).
func Metadata(version string) ([]byte, error) {
	m := semver.FindStringSubmatch(version)
	if m == nil {
		return nil, fmt.Errorf("libvirt provider metadata: version %q is not vMAJOR.MINOR.PATCH", version)
	}
	return fmt.Appendf(nil, `apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Metadata
releaseSeries:
- major: %s
  minor: %s
  contract: v1beta2
`, m[1], m[2]), nil
}
