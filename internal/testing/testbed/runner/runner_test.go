package runner

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/versions"
)

// A TenantControlPlane's containers, with the args Kamaji e51909f writes
// (internal/builders/controlplane/deployment.go): kube-apiserver keeps the
// port its siblings dial, every listener is on loopback, and the paths
// under the projected volume are mapped into the process's folder.
func TestTenantControlPlaneCommandLines(t *testing.T) {
	pins := versions.MustGet()
	mounts := []mount{{path: "/etc/kubernetes/pki", local: "/r/etc/kubernetes/pki"}}
	next := 40000
	free := func() (int, error) { next++; return next, nil }
	image := func(name string) Image {
		im, ok := Match("registry.k8s.io/"+name+":"+pins.Kubernetes, pins)
		if !ok {
			t.Fatalf("the runner runs no %s at %s", name, pins.Kubernetes)
		}
		return im
	}

	api := corev1.Container{Name: "kube-apiserver", Command: []string{"kube-apiserver"}, Args: []string{
		"--secure-port=31234", "--advertise-address=127.0.0.1", "--client-ca-file=/etc/kubernetes/pki/ca.crt",
		"--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt"}}
	args, ports, err := commandLine(api, image("kube-apiserver"), mounts, "/r", nil, free)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--secure-port=31234", "--bind-address=127.0.0.1", "--client-ca-file=/r/etc/kubernetes/pki/ca.crt", "--etcd-cafile=/r/etc/kubernetes/pki/etcd/ca.crt"} {
		if !slices.Contains(args, want) {
			t.Errorf("kube-apiserver args %q lack %s", args, want)
		}
	}
	if ports[31234] != 31234 {
		t.Errorf("kube-apiserver port 31234 maps to %d, want itself (the pod's siblings dial it)", ports[31234])
	}

	kcm := corev1.Container{Name: "kube-controller-manager", Command: []string{"kube-controller-manager"}, Args: []string{"--bind-address=0.0.0.0", "--leader-elect=true"}}
	args, ports, err = commandLine(kcm, image("kube-controller-manager"), mounts, "/r", nil, free)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--bind-address=127.0.0.1") || slices.Contains(args, "--bind-address=0.0.0.0") {
		t.Errorf("kube-controller-manager args %q: --bind-address not moved to loopback", args)
	}
	if local := ports[10257]; local <= 40000 || !slices.Contains(args, "--secure-port="+strconv.Itoa(local)) {
		t.Errorf("kube-controller-manager's probe port 10257 maps to %d, args %q: want a free port set by --secure-port", local, args)
	}
	// Its probe, named by the container's port, reaches the moved port.
	p := &Proc{Ports: ports, container: kcm}
	if got, _ := localPort([]*Proc{{Ports: map[int32]int{31234: 31234}}, p}, intstr.FromInt32(10257)); got != ports[10257] {
		t.Errorf("the pod's port 10257 maps to %d, want %d", got, ports[10257])
	}
}

// Kamaji: its listeners on loopback, leader election off, the webhook CA
// path mapped into the cert-manager Secret's folder, and no start without
// --disable-telemetry.
func TestKamajiCommandLine(t *testing.T) {
	im, ok := Match("clastix/kamaji:26.4.2-edge", versions.MustGet())
	if !ok {
		t.Fatal("the runner runs no clastix/kamaji:26.4.2-edge")
	}
	mounts := []mount{{path: "/tmp", local: "/r/tmp"}, {path: "/tmp/k8s-webhook-server/serving-certs", local: "/r/tmp/k8s-webhook-server/serving-certs"}}
	c := corev1.Container{Name: "manager", Args: []string{"manager", "--health-probe-bind-address=:8081", "--leader-elect", "--metrics-bind-address=:8080", "--tmp-directory=/tmp/kamaji", "--disable-telemetry"}}
	n := 50000
	args, _, err := commandLine(c, im, mounts, "/r", nil, func() (int, error) { n++; return n, nil })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"manager", "--leader-elect=false", "--tmp-directory=/r/tmp/kamaji", "--webhook-ca-path=/r/tmp/k8s-webhook-server/serving-certs/ca.crt", "--disable-telemetry"} {
		if !slices.Contains(args, want) {
			t.Errorf("Kamaji args %q lack %s", args, want)
		}
	}
	for _, a := range args {
		if strings.Contains(a, "=:") {
			t.Errorf("Kamaji arg %s listens beyond loopback", a)
		}
	}
	if why := missingRequired(args, im); why != "" {
		t.Errorf("Kamaji with --disable-telemetry refused: %s", why)
	}
	if why := missingRequired(slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--disable-telemetry" }), im); !strings.Contains(why, "--disable-telemetry") {
		t.Errorf("Kamaji without --disable-telemetry: %q, want it refused naming the flag", why)
	}
}

// The hosts file names a Service only where its process listens on the
// Service's own port; it is rewritten in place (a bind mount holds the
// inode).
func TestHostsFile(t *testing.T) {
	r := &Runner{t: t, dir: t.TempDir()}
	api := &Proc{Ports: map[int32]int{31234: 31234}}
	api.Pod = []*Proc{api}
	webhook := &Proc{Ports: map[int32]int{9440: 41000, 8443: 41001}}
	webhook.Pod = []*Proc{webhook}
	tcp := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "t1", Namespace: "tenants"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 31234}}}}
	moved := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "capi-diag", Namespace: "capi-system"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8443}}}}
	if !servesItsPorts(tcp, api) || servesItsPorts(moved, webhook) {
		t.Fatalf("servesItsPorts: TenantControlPlane %v (want true), moved port %v (want false)", servesItsPorts(tcp, api), servesItsPorts(moved, webhook))
	}
	r.writeHosts(nil)
	before, err := os.Stat(r.hostsFile())
	if err != nil {
		t.Fatal(err)
	}
	r.writeHosts([]string{"t1.tenants.svc"})
	data, err := os.ReadFile(r.hostsFile())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "127.0.0.1 t1.tenants.svc t1.tenants.svc.cluster.local\n") || !strings.Contains(string(data), "127.0.0.1 localhost") {
		t.Errorf("hosts file:\n%s", data)
	}
	after, err := os.Stat(filepath.Join(r.dir, "hosts"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("the hosts file was replaced, not rewritten in place: a bind mount of it would keep the old one")
	}
}

// A process run withHosts resolves the Services named in the runner's
// hosts file, and the machine's /etc/hosts is not touched: the file is
// bind-mounted in a mount namespace of the process's own.
func TestWithHostsResolvesServices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a mount namespace of the process's own needs root")
	}
	getent, err := exec.LookPath("getent")
	if err != nil {
		t.Skip(err)
	}
	machine, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{t: t, dir: t.TempDir()}
	r.writeHosts([]string{"t1.tenants.svc"})
	cmd, err := r.withHosts(&exec.Cmd{Path: getent, Args: []string{getent, "hosts", "t1.tenants.svc"}, Env: []string{"PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	if got := strings.Fields(string(out)); len(got) < 2 || got[0] != "127.0.0.1" || got[1] != "t1.tenants.svc" {
		t.Errorf("getent hosts t1.tenants.svc in the process's namespace = %q, want 127.0.0.1", out)
	}
	after, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(machine) || strings.Contains(string(after), "t1.tenants.svc") {
		t.Error("the machine's /etc/hosts changed")
	}
}

// The kamaji-etcd chart's etcd container (templates/etcd_sts.yaml of
// v0.15.0), matched at labctl's pinned image: its listeners stay on their
// own ports, on loopback, since clients dial the Pod's name at 2379; its
// name comes from the downward API; its data directory is the claim's
// folder.
func TestKamajiEtcdCommandLine(t *testing.T) {
	pins := versions.MustGet()
	im, ok := Match(pins.KamajiEtcd.EtcdImage, pins)
	if !ok || im.Binary != "etcd" {
		t.Fatalf("the runner does not run the pinned kamaji-etcd image %s (%+v)", pins.KamajiEtcd.EtcdImage, im)
	}
	c := corev1.Container{Name: "etcd", Command: []string{"etcd",
		"--data-dir=/var/run/etcd", "--name=$(POD_NAME)",
		"--listen-client-urls=https://0.0.0.0:2379", "--listen-metrics-urls=http://0.0.0.0:2381", "--listen-peer-urls=https://0.0.0.0:2380",
		"--cert-file=/etc/etcd/pki/server.pem"}}
	mounts := []mount{{path: "/var/run/etcd", local: "/r/volumes/kamaji-system_data-kamaji-etcd-0"}, {path: "/etc/etcd/pki", local: "/r/pod/etc/etcd/pki"}}
	args, ports, err := commandLine(c, im, mounts, "/r/pod", []string{"POD_NAME=kamaji-etcd-0"}, func() (int, error) { return 0, errors.New("no port may move") })
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(args, " ")
	for _, want := range []string{"--data-dir=/r/volumes/kamaji-system_data-kamaji-etcd-0", "--name=kamaji-etcd-0",
		"--listen-client-urls=https://127.0.0.1:2379", "--listen-metrics-urls=http://127.0.0.1:2381", "--listen-peer-urls=https://127.0.0.1:2380",
		"--cert-file=/r/pod/etc/etcd/pki/server.pem"} {
		if !strings.Contains(got, want) {
			t.Errorf("etcd's command line lacks %s:\n%s", want, got)
		}
	}
	for _, p := range []int32{2379, 2380, 2381} {
		if ports[p] != int(p) {
			t.Errorf("container port %d maps to %d, want its own port", p, ports[p])
		}
	}
	if _, _, err := commandLine(corev1.Container{Command: []string{"etcd", "--listen-client-urls=https://0.0.0.0"}}, im, nil, "/r", nil, nil); err == nil {
		t.Error("a listen URL without a port was taken")
	}
}

// A volume item whose key the Secret does not hold yet is waited for, as
// kubelet waits (the kamaji-etcd chart makes its Secrets empty, and
// cert-manager fills them); an optional source is not.
func TestVolumeItemsWaitForTheirKeys(t *testing.T) {
	items := []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}, {Key: "tls.crt", Path: "server.pem"}}
	_, err := pick(map[string][]byte{"tls.crt": []byte("c")}, items, nil, "Secret kamaji-system/kamaji-etcd-server-certs", "certs")
	if err == nil || !strings.Contains(err.Error(), "waiting for key ca.crt of Secret kamaji-system/kamaji-etcd-server-certs (volume certs)") {
		t.Errorf("a missing key: %v", err)
	}
	optional := true
	got, err := pick(map[string][]byte{"tls.crt": []byte("c")}, items, &optional, "Secret s", "v")
	if err != nil || len(got) != 1 || string(got["server.pem"]) != "c" {
		t.Errorf("an optional source: %v, %v", got, err)
	}
}

// A tenant's control plane at the release before the pin runs that
// release's binaries, by their versioned names; any other version is not
// run under the pin's name.
func TestControlPlaneImagesOfThePreviousRelease(t *testing.T) {
	pins := versions.MustGet()
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		im, ok := Match("registry.k8s.io/"+name+":"+testbed.PreviousKubernetes, pins)
		if !ok || im.Binary != name+"-"+testbed.PreviousKubernetes {
			t.Errorf("%s:%s runs %q (%v), want %s-%s", name, testbed.PreviousKubernetes, im.Binary, ok, name, testbed.PreviousKubernetes)
		}
		if im, ok := Match("registry.k8s.io/"+name+":v1.34.0", pins); ok {
			t.Errorf("%s:v1.34.0 runs %q; the test bed has no such build", name, im.Binary)
		}
	}
	if im, ok := Match("registry.k8s.io/kube-apiserver:"+pins.Kubernetes, pins); !ok || im.Binary != "kube-apiserver" {
		t.Errorf("kube-apiserver at the pin runs %q (%v)", im.Binary, ok)
	}
}
