// Package upstream renders the test bed's CRDs and webhook configurations
// from the upstream modules' own config/ folders, with kustomize, the way
// each project's release manifests are made. So the CRDs carry what the
// releases carry and the bases alone lack: the Cluster API contract labels
// (cluster.x-k8s.io/v1beta2: v1alpha2 on CAPMOX's CRDs, which the Cluster
// controller looks up), the conversion webhooks and cert-manager's CA
// injection annotations.
//
// The module sources come from the Go module cache (`go mod download
// -json`), at the version the test bed's wrapper module under
// hack/testbed/<wrapper> selects, so the CRDs always match the controller
// binaries hack/testenv.sh builds from the same wrapper. Nothing is read
// from ../shared: a fresh clone renders them.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/internal/versions"
)

// GoEnv is where go looks for its module cache, build cache and env
// file, as the test process found them when it started, as NAME=value
// pairs to append to a go command's environment: tests that point HOME or
// XDG_* at a temporary folder must not send go mod download or go build
// to a new, empty module and build cache there (whose read-only files the
// temporary folder's cleanup then cannot remove, unless it runs as root).
func GoEnv() []string { return slices.Clone(goHome) }

var goHome = func() []string {
	var env []string
	for _, k := range []string{"HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "GOPATH", "GOMODCACHE", "GOCACHE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}()

// Provider is one upstream component: a module, the test bed wrapper that
// pins its version, and the folder of its release kustomization.
type Provider struct {
	// Name is how tests ask for it.
	Name string
	// Wrapper is the folder under hack/testbed whose go.mod selects the
	// module's version; empty means Version below.
	Wrapper string
	// Module is the Go module path.
	Module string
	// Pin is labctl's pin of the module in embedded/versions.yaml. Where
	// there is no wrapper it is the version rendered; where there is, the
	// wrapper must select it (TestWrappersSelectThePins), except as
	// TestbedVersions says. nil for a test bed part labctl does not pin
	// (kwok): its wrapper alone selects it.
	Pin func(versions.Pins) string
	// Kustomization is the folder, inside the module, that the release
	// manifests are built from. Empty means Files.
	Kustomization string
	// Files is a folder of plain manifests, for a module without a
	// kustomization of its CRDs.
	Files string
	// ReleaseFile is the components file, inside the module, for a
	// project that commits its release manifest (its release target's
	// output) instead of building it at release time: it is used as it
	// is, image and all. Metadata is its clusterctl metadata.yaml, when
	// not at the module root.
	ReleaseFile, Metadata string
	// Image is the manager's image as the project's release publishes it
	// (registry and name, no tag): the release sets it in place of the
	// development image config/ names (their Makefiles' release targets).
	Image string
	// Type is clusterctl's provider type (core, bootstrap, control-plane,
	// infrastructure, ipam), which names the release's components file
	// <type>-components.yaml; empty for what is not a provider.
	Type string
}

// Providers are the components the test bed renders, by name.
var Providers = map[string]Provider{
	"cluster-api": {Name: "cluster-api", Wrapper: "controllers", Module: "sigs.k8s.io/cluster-api", Kustomization: "config/default", Pin: pinCAPI,
		Image: "registry.k8s.io/cluster-api/cluster-api-controller", Type: "core"},
	"kubeadm-bootstrap": {Name: "kubeadm-bootstrap", Wrapper: "controllers", Module: "sigs.k8s.io/cluster-api", Kustomization: "bootstrap/kubeadm/config/default", Pin: pinCAPI,
		Image: "registry.k8s.io/cluster-api/kubeadm-bootstrap-controller", Type: "bootstrap"},
	"kubeadm-control-plane": {Name: "kubeadm-control-plane", Wrapper: "controllers", Module: "sigs.k8s.io/cluster-api", Kustomization: "controlplane/kubeadm/config/default", Pin: pinCAPI,
		Image: "registry.k8s.io/cluster-api/kubeadm-control-plane-controller", Type: "control-plane"},
	"capmox": {Name: "capmox", Wrapper: "controllers", Module: "github.com/ionos-cloud/cluster-api-provider-proxmox", Kustomization: "config/default",
		Pin: func(p versions.Pins) string { return p.CAPMOX }, Image: "ghcr.io/ionos-cloud/cluster-api-provider-proxmox", Type: "infrastructure"},
	"ipam-in-cluster": {Name: "ipam-in-cluster", Wrapper: "ipam", Module: "sigs.k8s.io/cluster-api-ipam-provider-in-cluster", Kustomization: "config/default",
		Pin: func(p versions.Pins) string { return p.IPAMInCluster }, Image: "registry.k8s.io/capi-ipam-ic/cluster-api-ipam-in-cluster-controller", Type: "ipam"},
	"cluster-api-operator": {Name: "cluster-api-operator", Wrapper: "controllers", Module: "sigs.k8s.io/cluster-api-operator", Kustomization: "config/default",
		Pin: func(p versions.Pins) string { return p.ClusterAPIOperator }, Image: "registry.k8s.io/capi-operator/cluster-api-operator"},
	// Its Makefile's release target writes config/control-plane-components.yaml
	// (kustomize build config/default, the image already the released one),
	// committed with each tag; the release assets are that file and
	// config/metadata.yaml.
	"kamaji-provider": {Name: "kamaji-provider", Wrapper: "kamaji-provider", Module: "github.com/clastix/cluster-api-control-plane-provider-kamaji",
		ReleaseFile: "config/control-plane-components.yaml", Metadata: "config/metadata.yaml",
		Pin: func(p versions.Pins) string { return p.KamajiControlPlane }, Image: "docker.io/clastix/cluster-api-control-plane-provider-kamaji", Type: "control-plane"},
	// k3s's helm-controller is no Cluster API provider and has no wrapper;
	// its CRDs are generated files, at the version k3s bundles.
	"helm-controller": {Name: "helm-controller", Module: "github.com/k3s-io/helm-controller", Files: "pkg/crds/yaml/generated",
		Pin: func(p versions.Pins) string { return p.HelmController }},
}

func pinCAPI(p versions.Pins) string { return p.ClusterAPI }

// TestbedVersions are where the test bed runs another version than labctl
// pins, by module, with the version it runs: the module proxy here does
// not serve the pin. docs/testing.md says so too.
var TestbedVersions = map[string]string{
	// Kamaji at e51909f (issue 27), the tag of that commit: labctl pins no
	// Kamaji image on this branch yet, so the runner runs the image at this
	// tag from the binary built from that commit.
	"github.com/clastix/kamaji": "26.4.2-edge",
	// The pin v1.12.11 (and v1.12.9, which CAPMOX v0.9.0 replaces Cluster
	// API with) are not served; v1.12.10 is.
	"sigs.k8s.io/cluster-api": "v1.12.10",
}

// Module is a module as the module cache holds it.
type Module struct {
	Path    string
	Version string
	Dir     string
}

// Components are a provider's rendered manifests.
type Components struct {
	Provider Provider
	Module   Module
	Objects  []*unstructured.Unstructured
}

// Locate downloads (when missing) and finds the provider's module in the
// module cache. root is the labctl module root, where hack/testbed is.
func Locate(ctx context.Context, root string, p Provider) (Module, error) {
	pins, err := versions.Get()
	if err != nil {
		return Module{}, fmt.Errorf("locating %s: %w", p.Name, err)
	}
	arg, dir := p.Module, root
	if p.Pin != nil {
		arg += "@" + p.Pin(pins)
	}
	if p.Wrapper != "" {
		// Without a version, go mod download takes the one the wrapper's
		// build list selects, replace directives included.
		arg, dir = p.Module, filepath.Join(root, "hack", "testbed", p.Wrapper)
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			return Module{}, fmt.Errorf("locating %s: the test bed wrapper module %s is missing: %w", p.Name, dir, err)
		}
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", arg)
	cmd.Dir = dir
	// The wrapper's go.sum is the whole truth; -tags and the like from the
	// caller's GOFLAGS mean nothing here.
	cmd.Env = append(append(os.Environ(), goHome...), "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m struct {
		Path, Version, Dir, Error string
	}
	if jerr := json.Unmarshal(out, &m); jerr == nil && m.Error != "" {
		return Module{}, fmt.Errorf("locating %s: go mod download %s in %s: %s", p.Name, arg, dir, m.Error)
	}
	if err != nil {
		return Module{}, fmt.Errorf("locating %s: go mod download %s in %s: %w: %s", p.Name, arg, dir, err, strings.TrimSpace(stderr.String()))
	}
	if m.Dir == "" {
		return Module{}, fmt.Errorf("locating %s: go mod download %s in %s named no folder", p.Name, arg, dir)
	}
	return Module{Path: m.Path, Version: m.Version, Dir: m.Dir}, nil
}

// Render builds the provider's manifests from its module: its release
// kustomization, or its plain files.
func Render(ctx context.Context, root string, p Provider) (*Components, error) {
	m, err := Locate(ctx, root, p)
	if err != nil {
		return nil, err
	}
	var data []byte
	switch {
	case p.ReleaseFile != "":
		data, err = os.ReadFile(filepath.Join(m.Dir, filepath.FromSlash(p.ReleaseFile)))
	case p.Kustomization != "":
		data, err = Kustomize(filepath.Join(m.Dir, filepath.FromSlash(p.Kustomization)))
	default:
		data, err = readFiles(filepath.Join(m.Dir, filepath.FromSlash(p.Files)))
	}
	if err != nil {
		return nil, fmt.Errorf("rendering %s from %s@%s: %w", p.Name, m.Path, m.Version, err)
	}
	objs, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("rendering %s from %s@%s: %w", p.Name, m.Path, m.Version, err)
	}
	return &Components{Provider: p, Module: m, Objects: objs}, nil
}

// Kustomize runs kustomize's build on a folder, as `kustomize build` would.
// The module cache is read-only; kustomize only reads.
func Kustomize(dir string) ([]byte, error) {
	opts := krusty.MakeDefaultOptions()
	// Upstream config/default folders patch files of sibling folders.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return out, nil
}

func readFiles(dir string) ([]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(data)
		buf.WriteString("\n")
	}
	return buf.Bytes(), nil
}

// Decode splits a multi-document YAML stream into objects, skipping empty
// documents.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for i, doc := range splitDocs(data) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}

func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if t := bytes.TrimRight(line, "\r\n"); bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

// Kind returns the objects of one kind.
func (c *Components) Kind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range c.Objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// CRDs returns the provider's CRDs, typed.
func (c *Components) CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, o := range c.Kind("CustomResourceDefinition") {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crd); err != nil {
			return nil, fmt.Errorf("%s: CRD %s: %w", c.Provider.Name, o.GetName(), err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// Webhooks returns the provider's validating and mutating webhook
// configurations, typed.
func (c *Components) Webhooks() ([]*admissionregistrationv1.ValidatingWebhookConfiguration, []*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	return c.WebhooksAsOperator(nil)
}

// WebhooksAsOperator are Webhooks with a Provider CR spec's patches
// applied, as the operator applies them to the release
// (PatchAsOperator); spec may be nil.
func (c *Components) WebhooksAsOperator(spec map[string]any) ([]*admissionregistrationv1.ValidatingWebhookConfiguration, []*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var vs []*admissionregistrationv1.ValidatingWebhookConfiguration
	var ms []*admissionregistrationv1.MutatingWebhookConfiguration
	for _, o := range c.Kind("ValidatingWebhookConfiguration") {
		o = o.DeepCopy()
		if err := PatchAsOperator(o, spec); err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %w", c.Provider.Name, o.GetName(), err)
		}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, v); err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %w", c.Provider.Name, o.GetName(), err)
		}
		vs = append(vs, v)
	}
	for _, o := range c.Kind("MutatingWebhookConfiguration") {
		o = o.DeepCopy()
		if err := PatchAsOperator(o, spec); err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %w", c.Provider.Name, o.GetName(), err)
		}
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, m); err != nil {
			return nil, nil, fmt.Errorf("%s: %s: %w", c.Provider.Name, o.GetName(), err)
		}
		ms = append(ms, m)
	}
	return vs, ms, nil
}

// cache keeps each provider's rendering for the test binary: the module
// cache does not change under a running test.
var cache struct {
	sync.Mutex
	byName map[string]*Components
}

// Get renders the named provider once per process and returns it. Callers
// must not change the objects; CRDs and Webhooks return fresh copies.
func Get(ctx context.Context, root, name string) (*Components, error) {
	p, ok := Providers[name]
	if !ok {
		return nil, fmt.Errorf("unknown upstream provider %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	cache.Lock()
	defer cache.Unlock()
	if c := cache.byName[name]; c != nil {
		return c, nil
	}
	c, err := Render(ctx, root, p)
	if err != nil {
		return nil, err
	}
	if cache.byName == nil {
		cache.byName = map[string]*Components{}
	}
	cache.byName[name] = c
	return c, nil
}

// Names lists the providers Get knows.
func Names() []string {
	names := make([]string, 0, len(Providers))
	for n := range Providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
