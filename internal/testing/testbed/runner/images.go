package runner

import (
	"strings"

	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/upstream"
	"github.com/labctl/labctl/internal/versions"
)

// Image is an upstream component image the runner knows: the binary
// hack/testenv.sh builds from the same module, and where its command line
// puts the listeners and the webhook certificates.
type Image struct {
	// Name is the image's last path element, without registry or tag, as
	// the project's release names it (their Makefiles' IMAGE_NAME).
	Name string
	// Binary is the file in .testbed/bin, or an absolute path.
	Binary string
	// Module is the Go module the binary is built from; the image tag must
	// be labctl's pin of it or the version the test bed runs instead.
	Module string
	Pin    func(versions.Pins) string
	// Addrs are the flags holding a listen address (host:port), with
	// their defaults; Ports the flags holding a bare port.
	Addrs, Ports map[string]string
	// CertDir is the flag naming the webhook certificate folder (or a
	// file in it), with its default; empty when the binary takes
	// controller-runtime's default (under TMPDIR).
	CertDir, CertDirDefault string
	// CRLeaderElection says the binary's --leader-elect is
	// controller-runtime's, which finds its namespace only in the pod's
	// service account folder (/var/run/secrets/kubernetes.io/serviceaccount,
	// not there for a process here) and fails to start without it; the
	// runner turns it off (one process per Deployment: there is nothing to
	// elect).
	CRLeaderElection bool
	// InClusterFlag names the flag that replaces the in-cluster config for
	// a binary that builds it with client-go's BuildConfigFromFlags("", "")
	// (rest.InClusterConfig, which needs the service account token at
	// its fixed path, not there for a process here; KUBECONFIG is not
	// read). The runner sets it to its kubeconfig when the container does
	// not: the process reaches the same API server the in-cluster config
	// would.
	InClusterFlag string
	// FixedPorts are ports the binary binds on every interface with no
	// flag to move them; the runner takes their machine-wide lock first.
	FixedPorts []int
	// BindHosts are the flags holding a listen host alone (0.0.0.0 as the
	// container has it): the runner sets them to 127.0.0.1.
	BindHosts []string
	// PodPorts are the flags holding a bare port that the pod's other
	// containers dial on loopback, with their defaults: kube-apiserver's
	// --secure-port in a TenantControlPlane, which the kubeconfigs Kamaji
	// writes for its kube-controller-manager and kube-scheduler name as
	// 127.0.0.1:<port>. The runner keeps them (moving them would cut the
	// pod's containers apart) and takes their machine-wide lock first, so
	// the test must choose them free (the TenantControlPlane's port).
	PodPorts map[string]string
	// KeepURLs are the flags holding a comma-separated list of listen URLs
	// (etcd's --listen-client-urls=https://0.0.0.0:2379): the runner
	// binds them to 127.0.0.1 on the same ports, which it locks
	// machine-wide first, because clients dial the pod by name at the
	// container's own port (the DataStore's endpoint).
	KeepURLs []string
	// Requires are arguments the runner refuses to start the binary
	// without, saying so in the Deployment's status.
	Requires []string
	// OwnNetwork runs the process in a network namespace of its own
	// (netns.go), where its FixedPorts do not collide with another
	// binary's: its ports are exposed on free ports of the machine's
	// loopback, and it reaches the API server, the Services the hosts
	// file names and the ports given to Runner.Reach on the same ports of
	// its own loopback.
	OwnNetwork bool
	// Hosts gives the process an /etc/hosts of its own naming the
	// Services it dials by name (names.go): Kamaji reaches each tenant's
	// API server at https://<tcp>.<namespace>.svc:<port>.
	Hosts bool
}

// flags of Cluster API's managers: sigs.k8s.io/cluster-api v1.12.10
// main.go, bootstrap/kubeadm/main.go, controlplane/kubeadm/main.go and
// util/flags/manager.go.
var (
	capiAddrs = map[string]string{"health-addr": ":9440", "diagnostics-address": ":8443", "profiler-address": ""}
	capiPorts = map[string]string{"webhook-port": "9443"}
)

const crCertDir = "/tmp/k8s-webhook-server/serving-certs/"

// Images are the components labctl pins (embedded/versions.yaml) that the
// runner can run.
var Images = []Image{
	{Name: "cluster-api-controller", Binary: "cluster-api", Module: "sigs.k8s.io/cluster-api", Pin: func(p versions.Pins) string { return p.ClusterAPI },
		Addrs: capiAddrs, Ports: capiPorts, CertDir: "webhook-cert-dir", CertDirDefault: crCertDir, CRLeaderElection: true},
	{Name: "kubeadm-bootstrap-controller", Binary: "kubeadm-bootstrap", Module: "sigs.k8s.io/cluster-api", Pin: func(p versions.Pins) string { return p.ClusterAPI },
		Addrs: capiAddrs, Ports: capiPorts, CertDir: "webhook-cert-dir", CertDirDefault: crCertDir, CRLeaderElection: true},
	{Name: "kubeadm-control-plane-controller", Binary: "kubeadm-control-plane", Module: "sigs.k8s.io/cluster-api", Pin: func(p versions.Pins) string { return p.ClusterAPI },
		Addrs: capiAddrs, Ports: capiPorts, CertDir: "webhook-cert-dir", CertDirDefault: crCertDir, CRLeaderElection: true},
	// cmd/main.go of github.com/ionos-cloud/cluster-api-provider-proxmox
	// v0.9.0: its webhook server keeps controller-runtime's port 9443
	// (no flag), so the runner cannot move it.
	{Name: "cluster-api-provider-proxmox", Binary: "capmox", Module: "github.com/ionos-cloud/cluster-api-provider-proxmox", Pin: func(p versions.Pins) string { return p.CAPMOX },
		Addrs: map[string]string{"health-probe-bind-address": ":8081", "diagnostics-address": ":8443"}, CRLeaderElection: true, FixedPorts: []int{9443}},
	// main.go of sigs.k8s.io/cluster-api-ipam-provider-in-cluster v1.0.3.
	{Name: "cluster-api-ipam-in-cluster-controller", Binary: "ipam-in-cluster", Module: "sigs.k8s.io/cluster-api-ipam-provider-in-cluster", Pin: func(p versions.Pins) string { return p.IPAMInCluster },
		Addrs: map[string]string{"metrics-bind-address": ":8080", "health-probe-bind-address": ":8081"}, Ports: capiPorts,
		CertDir: "webhook-cert-dir", CertDirDefault: crCertDir, CRLeaderElection: true},
	// cmd/main.go of sigs.k8s.io/cluster-api-operator v0.28.0.
	{Name: "cluster-api-operator", Binary: "cluster-api-operator", Module: "sigs.k8s.io/cluster-api-operator", Pin: func(p versions.Pins) string { return p.ClusterAPIOperator },
		Addrs: map[string]string{"health-addr": ":9440", "diagnostics-address": ":8443", "profiler-address": "localhost:6060"}, Ports: capiPorts,
		CertDir: "webhook-cert-dir", CertDirDefault: crCertDir, CRLeaderElection: true},
	// cluster-autoscaler 1.35.0's config/flags/flags.go: --address; its
	// clusterapi provider (cloudprovider/clusterapi/clusterapi_provider.go)
	// builds the management cluster's config from --cloud-config, the
	// in-cluster config when that is empty.
	{Name: "cluster-autoscaler", Binary: "cluster-autoscaler", Module: "k8s.io/autoscaler/cluster-autoscaler", Pin: func(p versions.Pins) string { return p.ClusterAutoscaler },
		Addrs: map[string]string{"address": ":8085"}, InClusterFlag: "cloud-config"},
	// cmd/manager/cmd.go of github.com/clastix/kamaji at e51909f: its
	// webhook server is on 9443, hard-coded as CAPMOX's, so it runs in a
	// network namespace of its own; --webhook-ca-path must name a file that
	// exists, cert-manager's ca.crt beside the serving certificate by
	// default; without --disable-telemetry it reports to
	// telemetry.clastix.io, off the machine.
	{Name: "kamaji", Binary: "kamaji", Module: "github.com/clastix/kamaji", Pin: func(versions.Pins) string { return upstream.TestbedVersions["github.com/clastix/kamaji"] },
		Addrs: map[string]string{"metrics-bind-address": ":8080", "health-probe-bind-address": ":8081"}, CRLeaderElection: true,
		CertDir: "webhook-ca-path", CertDirDefault: crCertDir + "ca.crt", FixedPorts: []int{9443},
		Requires: []string{"--disable-telemetry"}, Hosts: true, OwnNetwork: true},
	// main.go of github.com/clastix/cluster-api-control-plane-provider-kamaji
	// v0.20.0: diagnostics from Cluster API's util/flags; its webhook
	// server (9443) never starts, as it registers no webhook.
	{Name: "cluster-api-control-plane-provider-kamaji", Binary: "kamaji-provider", Module: "github.com/clastix/cluster-api-control-plane-provider-kamaji",
		Pin:   func(p versions.Pins) string { return p.KamajiControlPlane },
		Addrs: map[string]string{"metrics-bind-address": ":8080", "health-probe-bind-address": ":8081", "diagnostics-address": ":8443"}, CRLeaderElection: true},
	// etcd of the kamaji-etcd chart's StatefulSet (charts/kamaji-etcd
	// v0.15.0 templates/etcd_sts.yaml): the test bed's etcd (v3.6.16, the
	// envtest build; the pinned image is v3.5.17, whose module the test
	// bed does not build) with the container's own flags, which 3.6 takes
	// as 3.5 does. Its client, peer and metrics listeners keep their
	// ports: Kamaji and a tenant's kube-apiserver dial
	// <pod>.kamaji-etcd.<namespace>.svc.cluster.local:2379, the DataStore's
	// endpoint.
	{Name: "etcd", Binary: "etcd", Module: "go.etcd.io/etcd/server/v3", Pin: kamajiEtcdTag,
		KeepURLs: []string{"listen-client-urls", "listen-peer-urls", "listen-metrics-urls"}},
	// A Kamaji TenantControlPlane's pod (internal/builders/controlplane/
	// deployment.go at e51909f): its kube-apiserver on the port the
	// TenantControlPlane names, which kube-controller-manager and
	// kube-scheduler dial on 127.0.0.1; their own secure ports serve only
	// their probes. Its --etcd-servers are the DataStore's endpoints, by
	// name for the kamaji-etcd chart's (Hosts).
	{Name: "kube-apiserver", Binary: "kube-apiserver", Module: "k8s.io/kubernetes", Pin: func(p versions.Pins) string { return p.Kubernetes },
		BindHosts: []string{"bind-address"}, PodPorts: map[string]string{"secure-port": "6443"}, Hosts: true},
	{Name: "kube-controller-manager", Binary: "kube-controller-manager", Module: "k8s.io/kubernetes", Pin: func(p versions.Pins) string { return p.Kubernetes },
		BindHosts: []string{"bind-address"}, Ports: map[string]string{"secure-port": "10257"}},
	{Name: "kube-scheduler", Binary: "kube-scheduler", Module: "k8s.io/kubernetes", Pin: func(p versions.Pins) string { return p.Kubernetes },
		BindHosts: []string{"bind-address"}, Ports: map[string]string{"secure-port": "10259"}},
}

// Labctl is labctl's own image (the libvirt provider's Deployment runs
// it: 'labctl provider libvirt'), run from bin, labctl built from the
// checkout with -tags provider (testbed.Labctl): the repository embedded/versions.yaml pins, at the tag mgmt
// install names (release.Version of this labctl's version). Its health
// flag is internal/provider/libvirt/controller's (cmd/provider.go); its
// leader election is controller-runtime's on a Lease in the namespace its
// Deployment names, which works here as it is.
func Labctl(bin string, pins versions.Pins) Image {
	repo := pins.LibvirtProvider.Repository
	return Image{Name: repo[strings.LastIndex(repo, "/")+1:], Binary: bin, Module: "github.com/labctl/labctl",
		Pin:   func(versions.Pins) string { return release.Version(versions.Version) },
		Addrs: map[string]string{"health-addr": ":9440"}}
}

// LabctlAt is Labctl for one release of labctl: bin built at version
// (testbed.LabctlAt) runs the image tagged version only, whatever the test
// process's own version, so two builds side by side each run the
// Deployment that names theirs, as a cluster pulls the tag it is given.
func LabctlAt(bin string, pins versions.Pins, version string) Image {
	im := Labctl(bin, pins)
	im.Pin = func(versions.Pins) string { return version }
	return im
}

// Match finds the image a container runs: by name, at a version the test
// bed has a binary for. ok is false for any other image (a sidecar such as
// kube-rbac-proxy, or another version).
func Match(image string, pins versions.Pins) (Image, bool) {
	return match(image, pins, Images)
}

func match(image string, pins versions.Pins, images []Image) (Image, bool) {
	ref := image
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	tag := ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	name := ref[strings.LastIndex(ref, "/")+1:]
	for _, im := range images {
		if im.Name != name {
			continue
		}
		if tag == im.Pin(pins) || (tag != "" && tag == upstream.TestbedVersions[im.Module]) {
			return im, true
		}
		// The control plane of the release before the pin, which the test
		// bed builds too, for a tenant made at it and upgraded.
		if im.Module == "k8s.io/kubernetes" && tag == testbed.PreviousKubernetes {
			if file, err := testbed.KubernetesBinaryName(tag, im.Binary); err == nil {
				im.Binary = file
				return im, true
			}
		}
	}
	return Image{}, false
}

// kamajiEtcdTag is the tag of the etcd image labctl pins for kamaji-etcd.
func kamajiEtcdTag(p versions.Pins) string {
	ref := p.KamajiEtcd.EtcdImage
	return ref[strings.LastIndex(ref, ":")+1:]
}
