// Package versions reads the upstream version pins from embedded/versions.yaml
// and carries labctl's own build version.
package versions

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/labctl/labctl/embedded"
)

// Set by the linker: -X github.com/labctl/labctl/internal/versions.Version=v0.1.0
var (
	Version = "dev"
	Commit  = "none"
	Date    = "unknown"
)

// Pins are the upstream versions labctl installs and renders.
type Pins struct {
	Kubernetes         string      `yaml:"kubernetes" json:"kubernetes"`
	K3s                string      `yaml:"k3s" json:"k3s"`
	CertManager        string      `yaml:"certManager" json:"certManager"`
	ClusterAPIOperator string      `yaml:"clusterAPIOperator" json:"clusterAPIOperator"`
	ClusterAPI         string      `yaml:"clusterAPI" json:"clusterAPI"`
	CAPMOX             string      `yaml:"capmox" json:"capmox"`
	IPAMInCluster      string      `yaml:"ipamInCluster" json:"ipamInCluster"`
	KamajiControlPlane string      `yaml:"kamajiControlPlane" json:"kamajiControlPlane"`
	Kamaji             Kamaji      `yaml:"kamaji" json:"kamaji"`
	KamajiEtcd         KamajiEtcd  `yaml:"kamajiEtcd" json:"kamajiEtcd"`
	ClusterAutoscaler  string      `yaml:"clusterAutoscaler" json:"clusterAutoscaler"`
	CoreDNS            string      `yaml:"coreDNS" json:"coreDNS"`
	Cilium             string      `yaml:"cilium" json:"cilium"`
	KubeVip            string      `yaml:"kubeVip" json:"kubeVip"`
	HelmController     string      `yaml:"helmController" json:"helmController"`
	LibvirtProvider    Image       `yaml:"libvirtProvider" json:"libvirtProvider"`
	ImageBuilder       string      `yaml:"imageBuilder" json:"imageBuilder"`
	Packer             string      `yaml:"packer" json:"packer"`
	Charts             Charts      `yaml:"charts" json:"charts"`
	UbuntuImage        UbuntuImage `yaml:"ubuntuImage" json:"ubuntuImage"`
}

// Charts says where the management stack's Helm charts come from.
type Charts struct {
	CertManager        ChartSource `yaml:"certManager" json:"certManager"`
	ClusterAPIOperator ChartSource `yaml:"clusterAPIOperator" json:"clusterAPIOperator"`
	KamajiEtcd         ChartSource `yaml:"kamajiEtcd" json:"kamajiEtcd"`
	Cilium             ChartSource `yaml:"cilium" json:"cilium"`
}

// Kamaji is the hosted control plane manager at one commit: its release
// tag (the image tag, and the version labctl packages its chart at), the
// commit and the image without a tag.
type Kamaji struct {
	Version string `yaml:"version" json:"version"`
	Commit  string `yaml:"commit" json:"commit"`
	Image   string `yaml:"image" json:"image"`
}

// ImageRef is Kamaji's image at its pinned tag.
func (k Kamaji) ImageRef() string { return k.Image + ":" + k.Version }

// KamajiEtcd is Kamaji's datastore chart and the etcd image it runs.
type KamajiEtcd struct {
	Chart     string `yaml:"chart" json:"chart"`
	EtcdImage string `yaml:"etcdImage" json:"etcdImage"`
}

// ChartSource is a chart repository and the chart's name in it.
type ChartSource struct {
	Repo  string `yaml:"repo" json:"repo"`
	Chart string `yaml:"chart" json:"chart"`
}

// CertManagerChartVersion is the cert-manager chart version: jetstack
// publishes it with the "v", as the pin is written.
func (p Pins) CertManagerChartVersion() string { return p.CertManager }

// ClusterAPIOperatorChartVersion is the operator's chart version: its
// repository lists it without the "v" of the release tag.
func (p Pins) ClusterAPIOperatorChartVersion() string {
	return strings.TrimPrefix(p.ClusterAPIOperator, "v")
}

// Image is an image labctl builds itself (its tag is labctl's version):
// where it is published, what it is built on, and for which platforms.
type Image struct {
	// Repository is the image's name without a tag.
	Repository string `yaml:"repository" json:"repository"`
	BaseImage  string `yaml:"baseImage" json:"baseImage"`
	// Platforms are os/arch pairs, as docker buildx names them.
	Platforms []string `yaml:"platforms" json:"platforms"`
}

// UbuntuImage is the pinned cloud image for the management VM.
type UbuntuImage struct {
	Release     string `yaml:"release" json:"release"`
	Codename    string `yaml:"codename" json:"codename"`
	URL         string `yaml:"url" json:"url"`
	ChecksumURL string `yaml:"checksumURL" json:"checksumURL"`
}

var (
	once    sync.Once
	pins    Pins
	pinsErr error
)

// Get returns the pins compiled into this binary.
func Get() (Pins, error) {
	once.Do(func() {
		pins, pinsErr = Parse(embedded.Versions)
	})
	return pins, pinsErr
}

// MustGet is Get for callers that run after the embedded data was tested.
func MustGet() Pins {
	p, err := Get()
	if err != nil {
		panic(err)
	}
	return p
}

// Parse decodes a versions.yaml strictly: an unknown or empty pin is an error.
func Parse(data []byte) (Pins, error) {
	var p Pins
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return Pins{}, fmt.Errorf("reading embedded versions.yaml: %w", err)
	}
	for _, pin := range p.List() {
		if pin.Version == "" {
			return Pins{}, fmt.Errorf("reading embedded versions.yaml: %s is not pinned", pin.Name)
		}
	}
	return p, nil
}

// Pin is one pinned upstream version, named by its versions.yaml key.
type Pin struct {
	Name    string
	Version string
}

// List gives every pin in versions.yaml order.
func (p Pins) List() []Pin {
	return []Pin{
		{"kubernetes", p.Kubernetes},
		{"k3s", p.K3s},
		{"certManager", p.CertManager},
		{"clusterAPIOperator", p.ClusterAPIOperator},
		{"clusterAPI", p.ClusterAPI},
		{"capmox", p.CAPMOX},
		{"ipamInCluster", p.IPAMInCluster},
		{"kamajiControlPlane", p.KamajiControlPlane},
		{"kamaji.version", p.Kamaji.Version},
		{"kamaji.commit", p.Kamaji.Commit},
		{"kamaji.image", p.Kamaji.Image},
		{"kamajiEtcd.chart", p.KamajiEtcd.Chart},
		{"kamajiEtcd.etcdImage", p.KamajiEtcd.EtcdImage},
		{"clusterAutoscaler", p.ClusterAutoscaler},
		{"coreDNS", p.CoreDNS},
		{"cilium", p.Cilium},
		{"kubeVip", p.KubeVip},
		{"helmController", p.HelmController},
		{"libvirtProvider.repository", p.LibvirtProvider.Repository},
		{"libvirtProvider.baseImage", p.LibvirtProvider.BaseImage},
		{"libvirtProvider.platforms", strings.Join(p.LibvirtProvider.Platforms, ",")},
		{"imageBuilder", p.ImageBuilder},
		{"packer", p.Packer},
		{"charts.certManager.repo", p.Charts.CertManager.Repo},
		{"charts.certManager.chart", p.Charts.CertManager.Chart},
		{"charts.clusterAPIOperator.repo", p.Charts.ClusterAPIOperator.Repo},
		{"charts.clusterAPIOperator.chart", p.Charts.ClusterAPIOperator.Chart},
		{"charts.kamajiEtcd.repo", p.Charts.KamajiEtcd.Repo},
		{"charts.kamajiEtcd.chart", p.Charts.KamajiEtcd.Chart},
		{"charts.cilium.repo", p.Charts.Cilium.Repo},
		{"charts.cilium.chart", p.Charts.Cilium.Chart},
		{"ubuntuImage.release", p.UbuntuImage.Release},
		{"ubuntuImage.codename", p.UbuntuImage.Codename},
		{"ubuntuImage.url", p.UbuntuImage.URL},
		{"ubuntuImage.checksumURL", p.UbuntuImage.ChecksumURL},
	}
}
