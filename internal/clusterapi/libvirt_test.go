package clusterapi_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/labctl/labctl/internal/clusterapi"
	libvirtv1 "github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
)

// mdOf is the MachineDeployment of pool and the machine template it names.
func mdOf(t *testing.T, r *clusterapi.Rendered, pool string) (md, tmpl *unstructured.Unstructured) {
	t.Helper()
	md = r.Find("MachineDeployment", clusterapi.PoolMachineDeploymentName(r.Name, pool))
	if md == nil {
		t.Fatalf("no MachineDeployment for pool %s", pool)
	}
	ref := field(t, md, "spec", "template", "spec", "infrastructureRef").(map[string]any)
	tmpl = r.Find(ref["kind"].(string), ref["name"].(string))
	if tmpl == nil {
		t.Fatalf("pool %s names %v, which is not rendered", pool, ref)
	}
	return md, tmpl
}

// A Proxmox cluster with a pool on two KVM hosts: the Cluster stays on its
// ProxmoxCluster; the KVM pool's machines find their hosts through a
// LibvirtCluster the Cluster does not reference, named by their template;
// the KVM pool's MachineDeployment carries no size annotations, because the
// provider publishes status.capacity; both pools are autoscaled from zero.
func TestMixedClusterPools(t *testing.T) {
	lab := load(t, "../config/testdata/valid/mixed-pools.yaml")
	r := render(t, lab, "lab1")
	if got := field(t, r.Find("Cluster", "lab1"), "spec", "infrastructureRef", "kind"); got != "ProxmoxCluster" {
		t.Errorf("the Cluster's infrastructure is %v, want its ProxmoxCluster", got)
	}
	if len(r.Pools) != 2 || r.Pools[0].Kind != "ProxmoxMachineTemplate" || r.Pools[1].Kind != "LibvirtMachineTemplate" {
		t.Fatalf("pools = %+v", r.Pools)
	}
	pmd, _ := mdOf(t, r, "pve")
	kmd, ktmpl := mdOf(t, r, "kvm")
	for _, md := range []*unstructured.Unstructured{pmd, kmd} {
		ann := md.GetAnnotations()
		if ann[clusterapi.AnnotationMinSize] != "0" || ann[clusterapi.AnnotationMaxSize] == "" {
			t.Errorf("%s is not autoscaled from zero: %v", md.GetName(), ann)
		}
		if _, ok := md.Object["spec"].(map[string]any)["replicas"]; ok {
			t.Errorf("%s sets spec.replicas though autoscaled", md.GetName())
		}
	}
	if a := pmd.GetAnnotations(); a[clusterapi.AnnotationCPU] != "4" || a[clusterapi.AnnotationMemory] != "1820Mi" {
		t.Errorf("the Proxmox pool's capacity annotations = %v, want cpu 4 and 1820Mi", a)
	}
	ka := kmd.GetAnnotations()
	for _, k := range []string{clusterapi.AnnotationCPU, clusterapi.AnnotationMemory, clusterapi.AnnotationMaxPods} {
		if v, ok := ka[k]; ok {
			t.Errorf("the KVM pool's MachineDeployment has %s=%s; its size comes from the template's status.capacity", k, v)
		}
	}
	if ka[clusterapi.AnnotationLabels] != "labctl.dev/hosts=kvm,labctl.dev/pool=kvm" {
		t.Errorf("the KVM pool's labels annotation = %q", ka[clusterapi.AnnotationLabels])
	}
	spec := field(t, ktmpl, "spec", "template", "spec").(map[string]any)
	if !equalJSON(spec, map[string]any{"cpus": 8, "memoryMiB": 16384, "diskGiB": 40, "image": map[string]any{"pool": "default", "volume": "ubuntu-2404-kube-v1.35.4.qcow2"}}) {
		t.Errorf("the KVM pool's LibvirtMachineTemplate spec = %v", spec)
	}
	lcName := field(t, ktmpl, "spec", "template", "metadata", "annotations", libvirtv1.ClusterAnnotation)
	lc := r.Find("LibvirtCluster", "lab1-kvm")
	if lc == nil || lcName != "lab1-kvm" {
		t.Fatalf("the template names LibvirtCluster %v; rendered: %v", lcName, lc)
	}
	want := map[string]any{
		"hosts": []any{
			map[string]any{"name": "kvm1", "uri": "qemu+ssh://root@kvm1.lan/system", "credentialsRef": map[string]any{"name": "lab1-libvirt-kvm1"}, "controlPlane": false},
			map[string]any{"name": "kvm2", "uri": "qemu+tls://kvm2.lan/system", "credentialsRef": map[string]any{"name": "lab1-libvirt-kvm2"}, "controlPlane": false},
		},
		"network":          map[string]any{"bridge": "br0", "dnsServers": []any{"192.168.4.1"}},
		"ipPool":           map[string]any{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "lab1-v4-icip"},
		"memoryAdjustment": 100,
	}
	if !equalJSON(lc.Object["spec"], want) {
		t.Errorf("LibvirtCluster lab1-kvm spec = %v\nwant %v (CAPMOX's pool, so both kinds of machine share one range)", lc.Object["spec"], want)
	}
	// The hosts' Secrets right after the Namespace, whole: the reader's
	// data, and the hypervisor whose files it came from.
	var secrets []corev1.Secret
	for _, o := range r.Objects[1:3] {
		var s corev1.Secret
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil || o.GetKind() != "Secret" {
			t.Fatalf("object %s %s after the Namespace, want a credentials Secret: %v", o.GetKind(), o.GetName(), err)
		}
		secrets = append(secrets, s)
	}
	if secrets[0].Type != corev1.SecretTypeSSHAuth || secrets[1].Type != corev1.SecretTypeTLS {
		t.Fatalf("credentials = %v", secrets)
	}
	for _, s := range secrets {
		host := s.Annotations[clusterapi.AnnotationCredentialsOf]
		if host == "" || string(s.Data["ssh-privatekey"]) != string(creds{}.data(host)["ssh-privatekey"]) {
			t.Errorf("rendered Secret %s lacks the reader's data or names no hypervisor: %v", s.Name, s.Annotations)
		}
	}
	kct := string(toYAML(t, []*unstructured.Unstructured{r.Find("KubeadmConfigTemplate", field(t, kmd, "spec", "template", "spec", "bootstrap", "configRef", "name").(string))}))
	if !strings.Contains(kct, "{{ ds.meta_data.provider_id }}") || strings.Contains(kct, "proxmox://") {
		t.Errorf("the KVM pool's kubelet provider-id is not the libvirt provider's:\n%s", kct)
	}
}

// A cluster wholly on KVM hosts: its infrastructure is a LibvirtCluster
// holding the VIP, its control plane (with the same kube-vip static pod as
// on Proxmox) on LibvirtMachineTemplates, its addresses from an
// InClusterIPPool of its own over nodeIPRange.
func TestLibvirtCluster(t *testing.T) {
	lab := load(t, "../config/testdata/valid/libvirt-cluster.yaml")
	r := render(t, lab, "lab1")
	if r.Find("ProxmoxCluster", "") != nil || r.Find("ProxmoxMachineTemplate", "") != nil {
		t.Error("a cluster on KVM hosts renders CAPMOX objects")
	}
	ref := field(t, r.Find("Cluster", "lab1"), "spec", "infrastructureRef").(map[string]any)
	if ref["kind"] != "LibvirtCluster" || ref["name"] != "lab1" || ref["apiGroup"] != "infrastructure.labctl.dev" {
		t.Errorf("infrastructureRef = %v", ref)
	}
	lc := r.Find("LibvirtCluster", "lab1")
	if got := field(t, lc, "spec", "controlPlaneEndpoint"); !equalJSON(got, map[string]any{"host": "192.168.4.30", "port": 6443}) {
		t.Errorf("controlPlaneEndpoint = %v", got)
	}
	if got := field(t, lc, "spec", "ipPool", "name"); got != "lab1-nodes" {
		t.Errorf("ipPool = %v", got)
	}
	pool := r.Find("InClusterIPPool", "lab1-nodes")
	if pool == nil || !equalJSON(pool.Object["spec"], map[string]any{"addresses": []any{"192.168.4.40-192.168.4.59"}, "prefix": 24, "gateway": "192.168.4.1"}) {
		t.Errorf("InClusterIPPool = %v", pool)
	}
	kcp := r.Find("KubeadmControlPlane", "")
	if got := field(t, kcp, "spec", "machineTemplate", "spec", "infrastructureRef", "kind"); got != "LibvirtMachineTemplate" {
		t.Errorf("the control plane runs on %v", got)
	}
	y := string(toYAML(t, []*unstructured.Unstructured{kcp}))
	for _, want := range []string{"/etc/kubernetes/manifests/kube-vip.yaml", "value: 192.168.4.30", "super-admin.conf", "{{ ds.meta_data.provider_id }}"} {
		if !strings.Contains(y, want) {
			t.Errorf("KubeadmControlPlane lacks %q", want)
		}
	}
	// The pool spans kvm1 and kvm2, the control plane only kvm1: the pool
	// has its own LibvirtCluster, and kvm1's Secret is rendered once.
	_, tmpl := mdOf(t, r, "kvm")
	if got := field(t, tmpl, "spec", "template", "metadata", "annotations", libvirtv1.ClusterAnnotation); got != "lab1-kvm" {
		t.Errorf("the pool's machines go to LibvirtCluster %v, want lab1-kvm", got)
	}
	if n := len(kindsOf(r.Objects, "Secret")); n != 2 {
		t.Errorf("%d credentials Secrets, want one per host (2)", n)
	}
}

// A KVM pool whose template names the libvirt image 'image build' uploads
// boots from that image's volume, <image>-<kubernetesVersion>.qcow2, the
// name the upload gives it.
func TestKVMPoolBootsTheBuiltImage(t *testing.T) {
	lab := load(t, "../config/testdata/valid/mixed-pools-image.yaml")
	r := render(t, lab, "lab1")
	_, ktmpl := mdOf(t, r, "kvm")
	img := field(t, ktmpl, "spec", "template", "spec", "image").(map[string]any)
	if img["volume"] != "ubuntu-kvm-v1.35.4.qcow2" || img["pool"] != "default" {
		t.Errorf("the KVM pool's image = %v, want volume ubuntu-kvm-v1.35.4.qcow2 in pool default", img)
	}
}

// kindsOf are the objects of kind among objs.
func kindsOf(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}
