package components

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/credentials"
	"github.com/labctl/labctl/internal/versions"
)

// Kamaji's part of the stack: where it goes and what it is called.
const (
	KamajiNamespace = "kamaji-system"
	// KamajiRelease is the Kamaji chart's release; the chart names its
	// Deployment after it.
	KamajiRelease = "kamaji"
	// KamajiEtcdRelease is the datastore chart's release; labctl's values
	// name its StatefulSet the same (fullnameOverride).
	KamajiEtcdRelease = "kamaji-etcd"
	// KamajiDataStore is the DataStore the datastore chart makes and
	// Kamaji gives every TenantControlPlane that names none (its
	// --datastore flag).
	KamajiDataStore = "default"
	// KamajiProviderVariables is the Secret of the Kamaji provider's
	// clusterctl variables (its spec.configSecret).
	KamajiProviderVariables = "kamaji-variables"
	// kamajiProviderAccount is the provider's ServiceAccount in its
	// release (config/control-plane-components.yaml).
	kamajiProviderAccount = "capi-kamaji-controller-manager"
)

// KamajiLibvirtVariables let the Kamaji provider v0.20.0 write a KVM
// tenant's endpoint into its LibvirtCluster. It patches only the kinds it
// knows and answers any other with "unsupported infrastructure provider"
// (controllers/kamajicontrolplane_controller_cluster_patch.go,
// patchCluster), unless its DynamicInfrastructureClusterPatch gate is on
// and the kind is in --dynamic-infrastructure-clusters (main.go); its
// release file sets both from these clusterctl variables.
var KamajiLibvirtVariables = map[string]string{
	"CACPPK_DYNAMIC_INFRASTRUCTURE_CLUSTER_PATCH": "true",
	"CACPPK_INFRASTRUCTURE_CLUSTERS":              "LibvirtCluster",
}

// KamajiCRDs are the CRDs Kamaji's chart brings; the provider and the
// datastore's DataStore need them.
var KamajiCRDs = []string{"tenantcontrolplanes.kamaji.clastix.io", "datastores.kamaji.clastix.io"}

// The files labctl carries for Kamaji (embedded/upstream, made and checked
// by TestKamajiFilesAreCurrent).
const embeddedUpstream = "upstream"

// KamajiChartFile is the embedded path of Kamaji's chart, packaged at the
// pinned version.
func KamajiChartFile(p versions.Pins) string {
	return embeddedUpstream + "/kamaji-" + p.Kamaji.Version + ".tgz"
}

// KamajiProviderFiles are the embedded paths of the Kamaji control-plane
// provider's release assets: the components (gzipped) and metadata.yaml.
func KamajiProviderFiles(p versions.Pins) (components, metadata string) {
	dir := embeddedUpstream + "/control-plane-kamaji/" + p.KamajiControlPlane + "/"
	return dir + "control-plane-components.yaml.gz", dir + "metadata.yaml"
}

// KamajiNeeded says whether the lab needs Kamaji: when lab.yaml enables
// it or a cluster has a Kamaji control plane (config's one rule,
// Lab.Providers).
func KamajiNeeded(lab *config.Lab) bool {
	return lab.Providers().Kamaji
}

// kamaji is Kamaji's part of the stack, in install order: Kamaji itself
// (its chart, carried in the binary: it brings the CRDs and the webhooks
// the DataStore goes through), its datastore (the kamaji-etcd chart) and
// the control-plane provider (through the operator, from the components
// the binary carries unless management.stack.kamaji.fetchURL names a
// place).
func kamaji(lab *config.Lab, pins versions.Pins, offline string) ([]Component, error) {
	st := lab.Management.Stack
	archive, err := embedded.FS.ReadFile(KamajiChartFile(pins))
	if err != nil {
		return nil, fmt.Errorf("reading Kamaji's chart from the binary: %w", err)
	}
	k, err := chartComponent(chartArgs{
		name: "Kamaji", release: KamajiRelease, namespace: KamajiNamespace,
		src: versions.ChartSource{Chart: "kamaji"}, version: pins.Kamaji.Version, archive: archive,
		values: "manifests/mgmt/kamaji-values.yaml",
		set: map[string]any{
			"image": map[string]any{"repository": pins.Kamaji.Image, "tag": pins.Kamaji.Version},
			// The image a TenantControlPlane's datastore migration runs;
			// Kamaji's default names the tag it was built with.
			"extraArgs":            []any{"--migrate-image=" + pins.Kamaji.ImageRef()},
			"defaultDatastoreName": KamajiDataStore,
		},
		deployments: []string{KamajiRelease}, crds: KamajiCRDs,
	})
	if err != nil {
		return nil, err
	}
	repo, tag, err := splitImage(pins.KamajiEtcd.EtcdImage)
	if err != nil {
		return nil, fmt.Errorf("embedded versions.yaml kamajiEtcd.etcdImage: %w", err)
	}
	etcd, err := chartComponent(chartArgs{
		name: "Kamaji datastore (kamaji-etcd)", release: KamajiEtcdRelease, namespace: KamajiNamespace,
		src: pins.Charts.KamajiEtcd, version: pins.KamajiEtcd.Chart, offline: offline,
		values: "manifests/mgmt/kamaji-etcd-values.yaml",
		set: map[string]any{
			"fullnameOverride": KamajiEtcdRelease,
			"image":            map[string]any{"repository": repo, "tag": tag},
			"datastore":        map[string]any{"name": KamajiDataStore},
		},
		statefulSets: []string{KamajiEtcdRelease},
	})
	if err != nil {
		return nil, err
	}
	d := providerDef{kind: "ControlPlaneProvider", ctype: "control-plane", name: "kamaji", namespace: KamajiNamespace,
		version: pins.KamajiControlPlane, fetchURL: st.Kamaji.FetchURL}
	if d.fetchURL == "" {
		d.release = func() ([]byte, []byte, error) { return kamajiProviderRelease(pins) }
	}
	kvm := slices.ContainsFunc(lab.Tenants(), func(c *config.Cluster) bool { return lab.TenantPlatform(c) == config.PlatformKVM })
	if kvm {
		d.vars, d.varsSecret = KamajiLibvirtVariables, KamajiProviderVariables
	}
	p, err := d.component(offline)
	if err != nil {
		return nil, err
	}
	if kvm {
		p.Objects = append(p.Objects, KamajiLibvirtRBAC()...)
	}
	out := []Component{k, etcd, p}
	// The tenant ClusterClasses use the provider's
	// KamajiControlPlaneTemplate kind, so they go in after it; only a lab
	// with a tenant gets them, as they carry its platforms' settings.
	if len(lab.Tenants()) > 0 {
		objs, err := tenantClusterClasses(lab, pins)
		if err != nil {
			return nil, err
		}
		if len(objs) > 0 {
			out = append(out, Component{Name: "tenant ClusterClasses", Version: pins.KamajiControlPlane, Install: ManifestInstall, Objects: objs})
		}
	}
	return out, nil
}

// tenantClusterClasses renders labctl's tenant ClusterClasses with the
// owner's SSH keys, read as cluster create reads a cluster's.
func tenantClusterClasses(lab *config.Lab, pins versions.Pins) ([]*unstructured.Unstructured, error) {
	return clusterapi.TenantClusterClasses(clusterapi.Input{Lab: lab, Credentials: credentials.Files{Lab: lab}, Pins: pins})
}

// kamajiProviderRelease reads the provider's release assets from the
// binary.
func kamajiProviderRelease(pins versions.Pins) (components, metadata []byte, err error) {
	cf, mf := KamajiProviderFiles(pins)
	gz, err := embedded.FS.ReadFile(cf)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the Kamaji provider's components from the binary: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the Kamaji provider's components from the binary: %w", err)
	}
	if components, err = io.ReadAll(zr); err != nil {
		return nil, nil, fmt.Errorf("reading the Kamaji provider's components from the binary: %w", err)
	}
	if metadata, err = embedded.FS.ReadFile(mf); err != nil {
		return nil, nil, fmt.Errorf("reading the Kamaji provider's metadata from the binary: %w", err)
	}
	return components, metadata, nil
}

// splitImage splits repository:tag; the tag is required (a pin).
func splitImage(ref string) (repo, tag string, err error) {
	i := strings.LastIndexByte(ref, ':')
	if i <= 0 || i == len(ref)-1 || strings.Contains(ref[i+1:], "/") {
		return "", "", fmt.Errorf("%q is not repository:tag", ref)
	}
	return ref[:i], ref[i+1:], nil
}

// KamajiLibvirtRBAC lets the Kamaji provider read and patch
// LibvirtClusters: its cached client watches the kind it reads, and its
// release's ClusterRole names only the kinds it knows.
func KamajiLibvirtRBAC() []*unstructured.Unstructured {
	const name = "labctl-kamaji-libvirtclusters"
	role := object(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, "", name, nil, map[string]any{
		"rules": []any{map[string]any{
			"apiGroups": []any{"infrastructure.labctl.dev"}, "resources": []any{"libvirtclusters"},
			"verbs": []any{"get", "list", "watch", "patch"},
		}},
	})
	binding := object(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding"}, "", name, nil, map[string]any{
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": kamajiProviderAccount, "namespace": KamajiNamespace}},
	})
	return []*unstructured.Unstructured{role, binding}
}
