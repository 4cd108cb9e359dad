package components

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/versions"
)

// providerDef is one Cluster API provider as cluster-api-operator knows it.
type providerDef struct {
	kind string // CoreProvider, BootstrapProvider, ...
	// ctype is the clusterctl provider type: core, bootstrap,
	// control-plane, infrastructure, ipam.
	ctype     string
	name      string // the operator's provider name: cluster-api, kubeadm, proxmox ...
	namespace string
	version   string
	fetchURL  string
	gates     map[string]bool
	secret    *providerSecret
	// vars are clusterctl variables of the provider's components, none
	// secret: they go in the Secret varsSecret, which spec.configSecret
	// names and the operator substitutes from.
	vars       map[string]string
	varsSecret string
	// capmoxTLS is how CAPMOX verifies the Proxmox API; set for CAPMOX only.
	capmoxTLS *capmoxTLS
	// release, when set, makes the provider's components and metadata
	// (labctl's own providers, carried by the binary): they always go to
	// the operator as the offline ConfigMap, online or not.
	release func() (components, metadata []byte, err error)
}

type providerSecret struct {
	data   map[string]string
	secret SecretField // the key holding the secret and where it came from
}

// label is clusterctl's name for the provider, and its folder in an
// offline tree: cluster-api, bootstrap-kubeadm, infrastructure-proxmox ...
func (p providerDef) label() string {
	if p.ctype == "core" {
		return p.name
	}
	return p.ctype + "-" + p.name
}

// Operator labels on provider ConfigMaps. The version label tells the
// operator which version a ConfigMap holds.
const (
	labelProviderName    = "provider.cluster.x-k8s.io/name"
	labelProviderType    = "provider.cluster.x-k8s.io/type"
	labelProviderVersion = "provider.cluster.x-k8s.io/version"
	annotationCompressed = "provider.cluster.x-k8s.io/compressed"
)

// maxPlainComponents is where components go into a ConfigMap gzipped: the
// API server refuses objects over 1 MiB.
const maxPlainComponents = 768 << 10

func providers(lab *config.Lab, pins versions.Pins, offline string, o Options) ([]Component, error) {
	// What the lab's clusters need too, not only what the stack enables
	// (config.Lab.Providers is the one rule validation reads as well).
	need := lab.Providers()
	var gates map[string]bool
	if need.ClusterTopology {
		// ClusterClass needs the topology controller in core and KCP.
		gates = map[string]bool{"ClusterTopology": true}
	}
	defs := []providerDef{
		{kind: "CoreProvider", ctype: "core", name: "cluster-api", namespace: "capi-system", version: pins.ClusterAPI, gates: gates},
		{kind: "BootstrapProvider", ctype: "bootstrap", name: "kubeadm", namespace: "capi-kubeadm-bootstrap-system", version: pins.ClusterAPI},
		{kind: "ControlPlaneProvider", ctype: "control-plane", name: "kubeadm", namespace: "capi-kubeadm-control-plane-system", version: pins.ClusterAPI, gates: gates},
	}
	if px := proxmoxFor(lab); px != nil {
		d := providerDef{kind: "InfrastructureProvider", ctype: "infrastructure", name: "proxmox", namespace: "capmox-system", version: pins.CAPMOX}
		if o.LocalFiles != SkipLocalFiles {
			v, err := tokenSecret(px, o)
			if err != nil {
				return nil, err
			}
			from := "env " + px.Proxmox.TokenSecret.Env
			if px.Proxmox.TokenSecret.Env == "" {
				from = "file " + px.Proxmox.TokenSecret.File
			}
			d.secret = &providerSecret{
				data: map[string]string{
					"PROXMOX_URL":    px.Proxmox.URL,
					"PROXMOX_TOKEN":  px.Proxmox.TokenID,
					"PROXMOX_SECRET": v,
				},
				secret: SecretField{Key: "PROXMOX_SECRET", From: from},
			}
		}
		t, err := capmoxTLSFor(px, o.LocalFiles != SkipLocalFiles)
		if err != nil {
			return nil, err
		}
		d.capmoxTLS = t
		defs = append(defs, d)
	}
	defs = append(defs, providerDef{kind: "IPAMProvider", ctype: "ipam", name: "in-cluster", namespace: "capi-ipam-in-cluster-system", version: pins.IPAMInCluster})
	if need.Libvirt {
		defs = append(defs, libvirtDef(pins.LibvirtProvider, release.Version(versions.Version)))
	}
	// Kamaji's provider comes with Kamaji and its datastore (kamaji.go).

	out := make([]Component, 0, len(defs))
	for _, d := range defs {
		c, err := d.component(offline)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// tokenSecret is px's token secret as o reads it: empty with
// SkipTokenSecrets.
func tokenSecret(px *config.Hypervisor, o Options) (string, error) {
	switch {
	case o.LocalFiles == SkipTokenSecrets:
		return "", nil
	case o.ReadSecret != nil:
		return o.ReadSecret(px)
	}
	return px.ReadTokenSecret()
}

// proxmoxFor picks the Proxmox endpoint CAPMOX talks to: the management
// VM's hypervisor, else the first cluster's, else the first listed. Nil
// when the lab has no Proxmox hypervisor: then CAPMOX is left out.
func proxmoxFor(lab *config.Lab) *config.Hypervisor {
	for _, name := range append([]string{lab.Management.Hypervisor}, clusterHypervisors(lab)...) {
		if h, err := lab.Hypervisor(name); err == nil && h.Proxmox != nil {
			return h
		}
	}
	for i := range lab.Hypervisors {
		if lab.Hypervisors[i].Proxmox != nil {
			return &lab.Hypervisors[i]
		}
	}
	return nil
}

func clusterHypervisors(lab *config.Lab) []string {
	names := make([]string, len(lab.Clusters))
	for i, c := range lab.Clusters {
		names[i] = c.Hypervisor
	}
	return names
}

var operatorGroup = "operator.cluster.x-k8s.io"

// ProviderGVKs are the kinds of cluster-api-operator v1alpha2's Provider
// CRs, the ones labctl makes and the ones it does not.
func ProviderGVKs() []schema.GroupVersionKind {
	kinds := []string{"CoreProvider", "BootstrapProvider", "ControlPlaneProvider", "InfrastructureProvider", "IPAMProvider", "AddonProvider", "RuntimeExtensionProvider"}
	out := make([]schema.GroupVersionKind, len(kinds))
	for i, k := range kinds {
		out[i] = schema.GroupVersionKind{Group: operatorGroup, Version: "v1alpha2", Kind: k}
	}
	return out
}

func (d providerDef) component(offline string) (Component, error) {
	gvk := schema.GroupVersionKind{Group: operatorGroup, Version: "v1alpha2", Kind: d.kind}
	c := Component{
		Name: d.kind + " " + d.name, Version: d.version, Install: ProviderInstall,
		Provider: &Provider{GVK: gvk, Name: d.name, Namespace: d.namespace, Version: d.version},
	}
	c.Objects = append(c.Objects, namespace(d.namespace))

	spec := map[string]any{"version": d.version}
	if d.secret != nil {
		s := opaqueSecret(d.namespace, ProxmoxSecret, d.secret.data)
		c.Objects = append(c.Objects, s)
		f := d.secret.secret
		f.Ref.GVK, f.Ref.Namespace, f.Ref.Name = s.GroupVersionKind(), d.namespace, ProxmoxSecret
		c.Secrets = append(c.Secrets, f)
	}
	if len(d.vars) > 0 {
		c.Objects = append(c.Objects, opaqueSecret(d.namespace, d.varsSecret, d.vars))
		spec["configSecret"] = map[string]any{"name": d.varsSecret, "namespace": d.namespace}
	}
	if d.ctype == "infrastructure" && d.name == "proxmox" {
		// The reference is there even when the Secret was not rendered
		// (status, emitted manifests): the Provider always needs it.
		spec["configSecret"] = map[string]any{"name": ProxmoxSecret, "namespace": d.namespace}
	}
	if t := d.capmoxTLS; t != nil {
		if t.caPEM != nil {
			c.Objects = append(c.Objects, object(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, d.namespace, ProxmoxCA, nil,
				map[string]any{"data": map[string]any{ProxmoxCAKey: string(t.caPEM)}}))
		}
		t.apply(spec)
	}
	if d.ctype == "infrastructure" && d.name == "proxmox" {
		capmoxTopologyDryRun(spec)
	}
	switch {
	case d.release != nil || offline != "":
		var cm *unstructured.Unstructured
		var err error
		if d.release != nil {
			cm, err = d.embedded()
		} else {
			cm, err = d.configMap(offline)
		}
		if err != nil {
			return Component{}, err
		}
		c.Objects = append(c.Objects, cm)
		// The version too: cluster-api-operator v0.28.0 refuses a
		// selector that matches more than one ConfigMap
		// (processProviderConfigMaps in
		// internal/controller/genericprovider_controller.go), and the
		// previous version's ConfigMap stays after an upgrade.
		spec["fetchConfig"] = map[string]any{"selector": map[string]any{"matchLabels": map[string]any{
			labelProviderName: d.name, labelProviderType: d.ctype, labelProviderVersion: d.version,
		}}}
	case d.fetchURL != "":
		spec["fetchConfig"] = map[string]any{"url": d.fetchURL}
	}
	if len(d.gates) > 0 {
		g := map[string]any{}
		for k, v := range d.gates {
			g[k] = v
		}
		spec["manager"] = map[string]any{"featureGates": g}
	}
	c.Objects = append(c.Objects, object(gvk, d.namespace, d.name, nil, map[string]any{"spec": spec}))
	return c, nil
}

// opaqueSecret is a Secret of a provider's clusterctl variables, which
// the operator reads through spec.configSecret.
func opaqueSecret(namespace, name string, vars map[string]string) *unstructured.Unstructured {
	data := map[string]any{}
	for k, v := range vars {
		data[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return object(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, namespace, name, nil, map[string]any{"type": "Opaque", "data": data})
}

// configMap packs a provider release from the offline tree into the
// ConfigMap cluster-api-operator reads through spec.fetchConfig.selector:
// keys components and metadata, and the version label.
func (d providerDef) configMap(offline string) (*unstructured.Unstructured, error) {
	dir := filepath.Join(offline, d.label(), d.version)
	names := []string{d.ctype + "-components.yaml", "components.yaml"}
	var components []byte
	var err error
	for _, n := range names {
		components, err = os.ReadFile(filepath.Join(dir, n))
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("offline folder: %s %s needs %s in %s (the release's asset, as clusterctl's overrides layout has it)",
			d.kind, d.name, strings.Join(names, " or "), dir)
	case err != nil:
		return nil, fmt.Errorf("offline folder: reading %s %s components: %w", d.kind, d.name, err)
	}
	metadata, err := os.ReadFile(filepath.Join(dir, "metadata.yaml"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("offline folder: %s %s needs metadata.yaml in %s (the release's asset)", d.kind, d.name, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("offline folder: reading %s %s metadata: %w", d.kind, d.name, err)
	}
	return d.packConfigMap(components, metadata)
}

// packConfigMap is the ConfigMap cluster-api-operator reads through
// spec.fetchConfig.selector for one release: keys components (gzipped
// past maxPlainComponents) and metadata, and the version label.
func (d providerDef) packConfigMap(components, metadata []byte) (*unstructured.Unstructured, error) {
	labels := map[string]string{labelProviderName: d.name, labelProviderType: d.ctype, labelProviderVersion: d.version}
	data := map[string]any{"metadata": string(metadata)}
	cm := object(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, d.namespace, d.label()+"-"+d.version, labels, map[string]any{"data": data})
	if len(components) <= maxPlainComponents {
		data["components"] = string(components)
		return cm, nil
	}
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	_, _ = zw.Write(components)
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing %s %s components: %w", d.kind, d.name, err)
	}
	if b.Len()+len(metadata) > 1000<<10 {
		return nil, fmt.Errorf("%s %s components are %d bytes even gzipped; a ConfigMap holds at most 1 MiB", d.kind, d.name, b.Len())
	}
	cm.Object["binaryData"] = map[string]any{"components": base64.StdEncoding.EncodeToString(b.Bytes())}
	cm.SetAnnotations(map[string]string{annotationCompressed: "true"})
	return cm, nil
}
