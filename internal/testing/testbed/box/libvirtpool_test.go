package box_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/provider/libvirt/api/v1alpha1"
	"github.com/labctl/labctl/internal/provider/libvirt/controller"
	"github.com/labctl/labctl/internal/provider/libvirt/release"
	"github.com/labctl/labctl/internal/testing/sshtest"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/runner"
)

// kvmPool is the pool lab1 gains on a KVM host: a worker far bigger than
// the Proxmox pool's 2 GiB.
const (
	kvmPool       = "kvm"
	kvmPoolMemory = "8Gi"
	// kvmOnlyMemory fits a kvm worker (8 GiB) and no Proxmox worker
	// (1820Mi allocatable, docs/clusters.md).
	kvmOnlyMemory = "4Gi"
)

// startLibvirtProvider installs labctl's libvirt provider in the box as
// cluster-api-operator would, from the binary's own release components
// (CRDs with the contract label, RBAC; not the Deployment), and runs the
// provider, controller.Run as 'labctl provider libvirt' does, in the test
// against the box. It stops when the test ends, after the box's other
// cleanups were registered (so it runs through cluster delete), or
// earlier by the stop it returns. tune, when set, adjusts the
// reconcilers after the test's usual timings (a test libvirtd's hosts).
func startLibvirtProvider(ctx context.Context, t testing.TB, e *bootEnv, tune func(*controller.Reconcilers)) (*testbed.LogBuffer, func()) {
	t.Helper()
	raw, err := release.Components("labctl:test", []string{"linux/amd64"})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 && u.GetKind() != "Deployment" {
			if u.GetKind() == "CustomResourceDefinition" {
				testbed.LabelAsTheOperator(u)
			}
			objs = append(objs, u)
		}
	}
	if _, err := e.kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
		t.Fatalf("installing the libvirt provider's components: %v", err)
	}
	log := &testbed.LogBuffer{}
	pctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(pctx, controller.Options{Kubeconfig: e.box.Env.Kubeconfig, HealthAddr: "127.0.0.1:0", Log: log,
			Tune: func(r *controller.Reconcilers) {
				r.Machine.Retry, r.Cluster.Recheck = 2*time.Second, 5*time.Second
				hosts := r.Cluster.Hosts
				hosts.DialTimeout = 2 * time.Second
				r.Machine.Hosts, r.Cluster.Hosts = hosts, hosts
				if tune != nil {
					tune(r)
				}
			}})
	}()
	var once sync.Once
	end := func() {
		once.Do(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("the libvirt provider ended with %v", err)
			}
		})
	}
	t.Cleanup(func() {
		end()
		if t.Failed() {
			t.Logf("libvirt provider log (last 40 lines):\n%s", runner.TailLines(log.String(), 40))
		}
	})
	return log, end
}

// kvmHost adds hypervisor kvm1 to the lab: a KVM host over qemu+ssh on a
// loopback port nothing listens on (no VM boots here), with a key and a
// known_hosts file of the test's, both 0600.
func kvmHost(t testing.TB, lab *config.Lab) {
	t.Helper()
	pub, _ := sshtest.UserKey(t)
	_, hostKey := sshtest.UserKey(t)
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte("[127.0.0.1]:9 "+string(ssh.MarshalAuthorizedKey(hostKey))), 0o600); err != nil {
		t.Fatal(err)
	}
	lab.Hypervisors = append(lab.Hypervisors, config.Hypervisor{Name: "kvm1", Libvirt: &config.Libvirt{
		URI: "qemu+ssh://root@127.0.0.1:9/system", StoragePool: "default", Bridge: "br0",
		SSHKeyFile: strings.TrimSuffix(pub, ".pub"), KnownHostsFile: known,
	}})
}

// kvmPoolFromZero turns lab1's one pool (workers) into pools: the same
// Proxmox pool, and a pool on the KVM host kvm1. 'labctl cluster create'
// again leaves the Proxmox pool as it was and adds the KVM pool's
// LibvirtCluster, credentials Secret, LibvirtMachineTemplate and
// MachineDeployment, with no size annotations. Pods that fit only a KVM
// worker then make the real cluster-autoscaler raise that pool from zero,
// sizing its workers from the LibvirtMachineTemplate's status.capacity,
// which the provider wrote; the Proxmox pool is not raised for them. No
// VM boots: the Machine's LibvirtMachine waits for the KVM host, which
// does not answer.
func kvmPoolFromZero(ctx context.Context, t testing.TB, e *bootEnv, opts cluster.Options, wcs kubernetes.Interface, as *runner.Proc) {
	t.Helper()
	lab := opts.Lab
	c := &lab.Clusters[0]
	sch, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	lcl, err := client.New(e.box.Env.Config, client.Options{Scheme: sch}) // knows the provider's kinds
	if err != nil {
		t.Fatal(err)
	}
	const ns = "lab1"
	mdOf := func(name string) *unstructured.Unstructured {
		return get(ctx, t, e.cl, "cluster.x-k8s.io", "MachineDeployment", ns, name)
	}
	proxmoxMD := clusterapi.PoolMachineDeploymentName("lab1", config.DefaultPool)
	before := mdOf(proxmoxMD)

	kvmHost(t, lab)
	w := c.Pools[0] // lab.yaml's workers
	c.Pools = []config.Pool{
		{Name: config.DefaultPool, Hypervisors: []string{c.Hypervisor}, Min: w.Min, Max: w.Max, Size: w.Size, Labels: w.Labels, Taints: w.Taints},
		{Name: kvmPool, Hypervisors: []string{"kvm1"}, Min: 0, Max: 2, Size: config.Size{CPUs: 4, Memory: kvmPoolMemory, Disk: "30Gi"},
			Template: &config.Template{Volume: "ubuntu-2404-kube-v1.35.4.qcow2"}},
	}
	if errs := config.Validate(lab); len(errs) > 0 {
		t.Fatalf("the lab with a KVM pool does not validate: %v", errs)
	}
	var errb bytes.Buffer
	opts.IO.Err = &errb
	if err := cluster.Create(ctx, opts); err != nil {
		t.Fatalf("labctl cluster create lab1 with a KVM pool: %v\n%s", err, errb.String())
	}
	t.Logf("cluster create with the KVM pool:\n%s", errb.String())

	after := mdOf(proxmoxMD)
	for _, path := range [][]string{{"spec", "template"}, {"metadata", "annotations"}} {
		b, _, _ := unstructured.NestedFieldNoCopy(before.Object, path...)
		a, _, _ := unstructured.NestedFieldNoCopy(after.Object, path...)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("writing lab1's workers as pools changed MachineDeployment %s %v:\n%v\n→ %v", proxmoxMD, path, b, a)
		}
	}
	kvmMD := clusterapi.PoolMachineDeploymentName("lab1", kvmPool)
	md := mdOf(kvmMD)
	ann := md.GetAnnotations()
	for k, v := range ann {
		if strings.HasPrefix(k, "capacity.cluster-autoscaler.kubernetes.io/") && k != clusterapi.AnnotationLabels && k != clusterapi.AnnotationTaints {
			t.Errorf("MachineDeployment %s has %s=%s; its size must come from status.capacity alone", kvmMD, k, v)
		}
	}
	if ann[clusterapi.AnnotationMinSize] != "0" || ann[clusterapi.AnnotationMaxSize] != "2" {
		t.Errorf("MachineDeployment %s bounds: %v", kvmMD, ann)
	}
	tmplName, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "infrastructureRef", "name")
	alive := func() {
		t.Helper()
		for name, p := range e.box.Procs {
			if exited, err := p.Exited(); exited {
				t.Fatalf("%s exited: %v", name, err)
			}
		}
		if !as.Running() {
			t.Fatalf("the autoscaler exited:\n%s", runner.Tail(as.Log, 30))
		}
	}
	var tmpl v1alpha1.LibvirtMachineTemplate
	waitUntil(ctx, t, time.Minute, "the provider's status.capacity on "+tmplName, alive, func() (bool, string) {
		if err := lcl.Get(ctx, types.NamespacedName{Namespace: ns, Name: tmplName}, &tmpl); err != nil {
			return false, err.Error()
		}
		mem := tmpl.Status.Capacity[corev1.ResourceMemory]
		return mem.Cmp(resource.MustParse(kvmPoolMemory)) == 0, fmt.Sprint(tmpl.Status)
	})

	// Pods only a KVM worker can hold.
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kvm-only"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "kvm-only"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "kvm-only"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "pause", Image: lab.ScaleTest.Workload.Image,
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse(kvmOnlyMemory),
					}},
				}}},
			},
		},
	}
	if _, err := wcs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxmoxReplicas := func() int64 {
		r, _, _ := unstructured.NestedInt64(mdOf(proxmoxMD).Object, "spec", "replicas")
		return r
	}
	startProxmox := proxmoxReplicas()
	started := time.Now()
	waitUntil(ctx, t, 3*time.Minute, "the autoscaler raising "+kvmMD+" from zero", alive, func() (bool, string) {
		r, found, _ := unstructured.NestedInt64(mdOf(kvmMD).Object, "spec", "replicas")
		return found && r >= 1, fmt.Sprintf("replicas %d (set: %v); autoscaler log:\n%s", r, found, runner.Tail(as.Log, 15))
	})
	t.Logf("the autoscaler raised %s from zero %.1fs after the pods were made", kvmMD, time.Since(started).Seconds())
	if r := proxmoxReplicas(); r > startProxmox {
		t.Errorf("the autoscaler raised the Proxmox pool %s to %d (was %d) for pods only a KVM worker holds", proxmoxMD, r, startProxmox)
	}

	// The Machine it made waits on the KVM pool's LibvirtCluster, found
	// through the template's annotation, whose host does not answer.
	waitUntil(ctx, t, 2*time.Minute, "the KVM pool's LibvirtMachine waiting for LibvirtCluster lab1-kvm", alive, func() (bool, string) {
		var lms v1alpha1.LibvirtMachineList
		if err := lcl.List(ctx, &lms, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, lm := range lms.Items {
			c := meta.FindStatusCondition(lm.Status.Conditions, v1alpha1.ReadyCondition)
			if lm.Annotations[v1alpha1.ClusterAnnotation] == "lab1-kvm" && c != nil &&
				c.Reason == v1alpha1.WaitingForClusterInfrastructureReason && strings.Contains(c.Message, "lab1-kvm") {
				return true, ""
			}
		}
		return false, fmt.Sprint(lms.Items)
	})
	var lc v1alpha1.LibvirtCluster
	if err := lcl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "lab1-kvm"}, &lc); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(lc.Status.Conditions, v1alpha1.HostsReachableCondition); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "kvm1") {
		t.Errorf("LibvirtCluster lab1-kvm's HostsReachable does not name the silent host kvm1: %v", c)
	}
	if err := wcs.AppsV1().Deployments("default").Delete(ctx, dep.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}
