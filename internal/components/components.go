// Package components is the management stack as an ordered list: each
// piece with the version it must run, how it installs (a Helm chart, a
// cluster-api-operator Provider CR, or plain manifests) and how it is known
// ready. 'mgmt install' walks the list in order; 'mgmt status' reads the
// same list back.
package components

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"text/template"

	helmv1 "github.com/k3s-io/helm-controller/pkg/apis/helm.cattle.io/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/labctl/labctl/embedded"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/versions"
)

// Install is how a component goes onto the cluster.
type Install string

// Ways to install.
const (
	ChartInstall    Install = "chart"
	ProviderInstall Install = "provider"
	ManifestInstall Install = "manifests"
)

// Component is one piece of the management stack.
type Component struct {
	// Name is what people see, e.g. "cert-manager" or
	// "InfrastructureProvider proxmox".
	Name    string
	Version string
	Install Install

	// Chart is set for chart components.
	Chart *Chart
	// Provider is set for provider components.
	Provider *Provider
	// Objects are what labctl applies itself: for a provider its
	// namespace, config Secret, offline ConfigMaps and the Provider CR;
	// for manifests, the manifests.
	Objects []*unstructured.Unstructured
	// Secrets are the object fields that hold secrets, so printed objects
	// can hide them.
	Secrets []SecretField
}

// Chart is a Helm chart and what says it is ready.
type Chart struct {
	Release helm.Release
	// Deployments in Release.Namespace that must be Available.
	Deployments []string
	// StatefulSets in Release.Namespace whose replicas must be ready.
	StatefulSets []string
	// CRDs the chart installs; they must be Established before the next
	// component, which may use them.
	CRDs []string
}

// Provider is a cluster-api-operator Provider CR.
type Provider struct {
	GVK       schema.GroupVersionKind
	Name      string
	Namespace string
	Version   string
}

// Ref names the Provider CR.
func (p *Provider) Ref() kube.Ref {
	return kube.Ref{GVK: p.GVK, Namespace: p.Namespace, Name: p.Name}
}

// SecretField is one key of a Secret that holds a secret value.
type SecretField struct {
	Ref kube.Ref
	Key string
	// From says where the value came from, e.g. "env PVE_TOKEN_SECRET".
	From string
}

// Options are the inputs of Build beyond the lab.
type Options struct {
	// OfflineDir, when set, is where charts and provider components come
	// from (air-gapped). It overrides the lab's stack.offlineDir.
	OfflineDir string
	// IgnoreOffline builds the online stack even where an offline folder
	// is configured: for reading the stack back, which needs no files.
	IgnoreOffline bool
	// LocalFiles says which of the secrets and files lab.yaml names Build
	// reads; the zero value reads them all.
	LocalFiles LocalFiles
	// ReadSecret reads a Proxmox hypervisor's token secret; nil means
	// (*config.Hypervisor).ReadTokenSecret. Only ReadLocalFiles calls it.
	ReadSecret func(h *config.Hypervisor) (string, error)
}

// LocalFiles are the ways Build treats what lab.yaml keeps outside the
// file: the Proxmox token secrets (env or file) and CA files.
type LocalFiles int

const (
	// ReadLocalFiles reads them: CAPMOX's configSecret holds the token
	// secret, and a ConfigMap the Proxmox CA (tls.caFile) CAPMOX verifies
	// with. The stack as mgmt install applies it.
	ReadLocalFiles LocalFiles = iota
	// SkipTokenSecrets reads the CA files but no token secret: the
	// configSecret is there with an empty value, and says where the value
	// would come from. For a dry run, which never reads a secret.
	SkipTokenSecrets
	// SkipLocalFiles reads none, and leaves out the objects that need one:
	// the configSecret and the CA ConfigMap. Nor is a fingerprint refused
	// that CAPMOX cannot pin (mgmt install refuses it). For reading the
	// stack back (mgmt status) and for emitted manifests.
	SkipLocalFiles
)

// Namespaces and names the stack uses.
const (
	CertManagerNamespace = "cert-manager"
	CertManagerRelease   = "cert-manager"
	OperatorNamespace    = "capi-operator-system"
	OperatorRelease      = "capi-operator"
	AutoscalerNamespace  = "cluster-autoscaler"
	// ProxmoxSecret holds PROXMOX_URL, PROXMOX_TOKEN and PROXMOX_SECRET
	// for CAPMOX, in CAPMOX's namespace.
	ProxmoxSecret = "proxmox-variables"
	// HelmChartNamespace is where k3s's helm-controller looks for
	// HelmCharts.
	HelmChartNamespace = "kube-system"
)

// Labels every object labctl renders here carries.
var commonLabels = map[string]string{
	"app.kubernetes.io/managed-by": "labctl",
	"app.kubernetes.io/part-of":    "labctl-mgmt",
}

// Build returns the management stack for lab, in install order.
func Build(lab *config.Lab, pins versions.Pins, o Options) ([]Component, error) {
	st := lab.Management.Stack
	offline := o.OfflineDir
	if offline == "" {
		offline = st.OfflineDir
	}
	if o.IgnoreOffline {
		offline = ""
	}
	if offline != "" {
		abs, err := files.ExpandHome(offline)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("offline folder %s (management.stack.offlineDir or --offline-dir) does not exist or is not a folder", offline)
		}
		offline = abs
	}

	cm, err := chartComponent(chartArgs{
		name: "cert-manager", release: CertManagerRelease, namespace: CertManagerNamespace,
		src: pins.Charts.CertManager, repo: st.ChartRepos.CertManager, version: pins.CertManagerChartVersion(),
		values: "manifests/mgmt/cert-manager-values.yaml", offline: offline,
		deployments: []string{"cert-manager", "cert-manager-cainjector", "cert-manager-webhook"},
		crds:        []string{"certificates.cert-manager.io"},
	})
	if err != nil {
		return nil, err
	}
	op, err := chartComponent(chartArgs{
		name: "cluster-api-operator", release: OperatorRelease, namespace: OperatorNamespace,
		src: pins.Charts.ClusterAPIOperator, repo: st.ChartRepos.ClusterAPIOperator, version: pins.ClusterAPIOperatorChartVersion(),
		values: "manifests/mgmt/cluster-api-operator-values.yaml", offline: offline,
		// The chart names its Deployment <release>-<chart>.
		deployments: []string{OperatorRelease + "-" + pins.Charts.ClusterAPIOperator.Chart},
		crds:        OperatorCRDs,
	})
	if err != nil {
		return nil, err
	}
	out := []Component{cm, op}

	provs, err := providers(lab, pins, offline, o)
	if err != nil {
		return nil, err
	}
	out = append(out, provs...)

	if KamajiNeeded(lab) {
		k, err := kamaji(lab, pins, offline)
		if err != nil {
			return nil, err
		}
		out = append(out, k...)
	}

	rbac, err := autoscalerRBAC(pins)
	if err != nil {
		return nil, err
	}
	return append(out, rbac), nil
}

// OperatorCRDs are the CRDs of the provider kinds labctl uses; the next
// components wait for them.
var OperatorCRDs = []string{
	"coreproviders.operator.cluster.x-k8s.io",
	"bootstrapproviders.operator.cluster.x-k8s.io",
	"controlplaneproviders.operator.cluster.x-k8s.io",
	"infrastructureproviders.operator.cluster.x-k8s.io",
	"ipamproviders.operator.cluster.x-k8s.io",
}

type chartArgs struct {
	name, release, namespace string
	src                      versions.ChartSource
	repo                     string // overrides src.Repo
	version                  string
	// archive is a chart the binary carries: no repository, no offline
	// file.
	archive []byte
	values  string // embedded file
	// set overrides values at the top level: what comes from the pins.
	set                             map[string]any
	offline                         string
	deployments, statefulSets, crds []string
}

func chartComponent(a chartArgs) (Component, error) {
	raw, err := embedded.FS.ReadFile(a.values)
	if err != nil {
		return Component{}, fmt.Errorf("reading embedded %s: %w", a.values, err)
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return Component{}, fmt.Errorf("reading embedded %s: %w", a.values, err)
	}
	mergeValues(values, a.set)
	ch := helm.Chart{Name: a.src.Chart, Version: a.version, Repo: a.src.Repo}
	if a.repo != "" {
		ch.Repo = a.repo
	}
	switch {
	case a.archive != nil:
		ch.Repo, ch.Archive = "", a.archive
	case a.offline != "":
		ch.Repo = ""
		ch.File = filepath.Join(a.offline, a.src.Chart+"-"+a.version+".tgz")
		if _, err := os.Stat(ch.File); err != nil {
			return Component{}, fmt.Errorf("offline folder %s has no %s: put the chart there ('helm pull %s --repo %s --version %s')",
				a.offline, filepath.Base(ch.File), a.src.Chart, a.src.Repo, a.version)
		}
	}
	return Component{
		Name: a.name, Version: a.version, Install: ChartInstall,
		Chart: &Chart{
			Release:     helm.Release{Name: a.release, Namespace: a.namespace, Chart: ch, Values: values},
			Deployments: a.deployments, StatefulSets: a.statefulSets, CRDs: a.crds,
		},
	}, nil
}

// mergeValues sets each of set in values, merging maps key by key.
func mergeValues(values, set map[string]any) {
	for k, v := range set {
		if sub, ok := v.(map[string]any); ok {
			if have, ok := values[k].(map[string]any); ok {
				mergeValues(have, sub)
				continue
			}
		}
		values[k] = v
	}
}

// HelmChartGVK is k3s helm-controller's HelmChart.
var HelmChartGVK = schema.GroupVersionKind{Group: "helm.cattle.io", Version: "v1", Kind: "HelmChart"}

// HelmChart renders c as a HelmChart object for k3s's helm-controller,
// which names the release after it. An offline chart travels inside it
// (spec.chartContent), so the VM needs no repository. The object is built
// from helm-controller's own Go types (github.com/k3s-io/helm-controller
// v0.17.7, the version k3s bundles), so a field labctl sets is one that
// helm-controller reads.
func (c *Chart) HelmChart() (*unstructured.Unstructured, error) {
	values, err := yaml.Marshal(c.Release.Values)
	if err != nil {
		return nil, fmt.Errorf("encoding the values of chart %s: %w", c.Release.Chart, err)
	}
	spec := helmv1.HelmChartSpec{
		TargetNamespace: c.Release.Namespace,
		CreateNamespace: true,
		ValuesContent:   string(values),
	}
	if a := c.Release.Chart.Archive; a != nil {
		spec.ChartContent = base64.StdEncoding.EncodeToString(a)
	} else if f := c.Release.Chart.File; f != "" {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading chart %s: %w", c.Release.Chart, err)
		}
		spec.ChartContent = base64.StdEncoding.EncodeToString(data)
	} else {
		spec.Chart, spec.Repo, spec.Version = c.Release.Chart.Name, c.Release.Chart.Repo, c.Release.Chart.Version
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&helmv1.HelmChart{Spec: spec})
	if err != nil {
		return nil, fmt.Errorf("rendering the HelmChart of chart %s: %w", c.Release.Chart, err)
	}
	// Only the spec is labctl's: the metadata comes from object, and the
	// status is helm-controller's (an empty one would only be noise in
	// plans and printed objects).
	return object(HelmChartGVK, HelmChartNamespace, c.Release.Name, nil, map[string]any{"spec": fields["spec"]}), nil
}

// object builds an unstructured object with labctl's labels.
func object(gvk schema.GroupVersionKind, namespace, name string, labels map[string]string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	maps.Copy(u.Object, fields)
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	if namespace != "" {
		u.SetNamespace(namespace)
	}
	l := maps.Clone(commonLabels)
	maps.Copy(l, labels)
	u.SetLabels(l)
	return u
}

func namespace(name string) *unstructured.Unstructured {
	return object(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, "", name, nil, nil)
}

// autoscalerRBAC renders the embedded RBAC every cluster-autoscaler shares.
func autoscalerRBAC(pins versions.Pins) (Component, error) {
	const file = "manifests/mgmt/cluster-autoscaler-rbac.yaml"
	raw, err := embedded.FS.ReadFile(file)
	if err != nil {
		return Component{}, fmt.Errorf("reading embedded %s: %w", file, err)
	}
	tpl, err := template.New(file).Option("missingkey=error").Parse(string(raw))
	if err != nil {
		return Component{}, fmt.Errorf("reading embedded %s: %w", file, err)
	}
	var b bytes.Buffer
	if err := tpl.Execute(&b, map[string]string{"Namespace": AutoscalerNamespace, "Version": pins.ClusterAutoscaler}); err != nil {
		return Component{}, fmt.Errorf("rendering embedded %s: %w", file, err)
	}
	objs, err := kube.ParseObjects(file, b.Bytes())
	if err != nil {
		return Component{}, err
	}
	for _, o := range objs {
		l := o.GetLabels()
		for k, v := range commonLabels {
			if _, ok := l[k]; !ok {
				l[k] = v
			}
		}
		o.SetLabels(l)
	}
	return Component{Name: "cluster-autoscaler RBAC", Version: pins.ClusterAutoscaler, Install: ManifestInstall, Objects: objs}, nil
}
