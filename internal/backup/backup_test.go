package backup

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

const (
	ownerKey  = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"
	pveSecret = "0b1e4c3a-pve-token-secret"
	sshKey    = "-----BEGIN OPENSSH PRIVATE KEY-----\nprovider-key-material\n-----END OPENSSH PRIVATE KEY-----\n"
	pass      = "correct horse battery"
)

// mgmtEnv is a management cluster's API: a real kube-apiserver with the
// real CRDs of Cluster API, CAPMOX, in-cluster IPAM, the operator and
// labctl's libvirt provider.
func mgmtEnv(t *testing.T) (*testbed.Env, client.Client, *kube.Client) {
	t.Helper()
	env := testbed.Start(t, testbed.WithCRDs("capi", "capmox", "ipam", "operator"), testbed.WithCRDPaths("../../embedded/provider/libvirt/crds"))
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = apiextensionsv1.AddToScheme(s)
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	labelAsTheOperator(t, c)
	kc, err := kube.Connect(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return env, c, kc
}

// labelAsTheOperator labels every provider CRD as the operator does
// (testbed.LabelAsTheOperator): clusterctl's move discovers the kinds to
// move by it.
func labelAsTheOperator(t *testing.T, c client.Client) {
	t.Helper()
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(context.Background(), &crds); err != nil {
		t.Fatal(err)
	}
	for i := range crds.Items {
		d := &crds.Items[i]
		testbed.LabelAsTheOperator(d)
		if err := c.Update(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
}

func obj(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func ownedBy(u *unstructured.Unstructured, owners ...*unstructured.Unstructured) {
	var refs []metav1.OwnerReference
	for i, o := range owners {
		refs = append(refs, metav1.OwnerReference{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Name: o.GetName(), UID: o.GetUID(), Controller: ptr.To(i == 0)})
	}
	u.SetOwnerReferences(refs)
}

func create(t *testing.T, c client.Client, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	if u.GetLabels() == nil && u.GetNamespace() == "lab1" {
		u.SetLabels(map[string]string{clusterapi.ClusterNameLabel: "lab1"})
	}
	if err := c.Create(context.Background(), u); err != nil {
		t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return u
}

func get(t *testing.T, c client.Client, apiVersion, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := obj(apiVersion, kind, ns, name)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatalf("reading %s %s/%s: %v", kind, ns, name, err)
	}
	return u
}

// setStatus writes status as the controller that owns it would.
func setStatus(t *testing.T, c client.Client, u *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	u.Object["status"] = status
	if err := c.Status().Update(context.Background(), u); err != nil {
		t.Fatalf("status of %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func specOf(t *testing.T, tmpl *unstructured.Unstructured) map[string]any {
	t.Helper()
	spec, found, err := unstructured.NestedMap(tmpl.Object, "spec", "template", "spec")
	if err != nil || !found {
		t.Fatalf("%s %s has no spec.template.spec", tmpl.GetKind(), tmpl.GetName())
	}
	return spec
}

// source is lab1 of examples/lab-mixed.yaml (a Proxmox pool and a KVM
// pool) as it is once running: labctl's own objects as 'cluster create'
// applies them, and what the controllers made from them (a Machine per
// pool with its infrastructure machine, bootstrap config, IP address and
// the cluster's certificate Secrets), with the status that says the
// cluster is provisioned, written as the controllers write it.
type source struct {
	env       *testbed.Env
	c         client.Client
	kc        *kube.Client
	rendered  *clusterapi.Rendered
	vmid      int64
	libvirtID string
}

func startSource(t *testing.T) *source {
	t.Helper()
	env, c, kc := mgmtEnv(t)
	ctx := context.Background()
	lab, _, err := config.Load(ctx, config.Request{Path: "../../examples/lab-mixed.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	// The hosts' credentials as create reads them from their files.
	r, err := clusterapi.Render(clusterapi.Input{Lab: lab, Cluster: "lab1", Credentials: hostFiles{}, Pins: versions.MustGet()})
	if err != nil {
		t.Fatal(err)
	}
	objs := append(append([]*unstructured.Unstructured{}, r.Objects...), r.Autoscaler...)
	if _, err := kc.Apply(ctx, objs, kube.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &source{env: env, c: c, kc: kc, rendered: r, vmid: 204, libvirtID: "0f0e5a52-5a1c-4c4e-9a3e-6d1f2b7c9e01"}

	// The operator's Provider for CAPMOX and its configSecret, as 'mgmt
	// install' makes them.
	create(t, c, obj("v1", "Namespace", "", "capmox-system"))
	sec := obj("v1", "Secret", "capmox-system", "proxmox-variables")
	_ = unstructured.SetNestedStringMap(sec.Object, map[string]string{"PROXMOX_SECRET": base64.StdEncoding.EncodeToString([]byte(pveSecret))}, "data")
	create(t, c, sec)
	prov := obj("operator.cluster.x-k8s.io/v1alpha2", "InfrastructureProvider", "capmox-system", "proxmox")
	_ = unstructured.SetNestedMap(prov.Object, map[string]any{"version": "v0.9.0", "configSecret": map[string]any{"name": "proxmox-variables", "namespace": "capmox-system"}}, "spec")
	create(t, c, prov)

	// What the controllers made. Cluster API's controllers make the
	// Cluster the owner of its infrastructure cluster and control plane
	// (Cluster controller), of the MachineDeployments and the templates
	// they and the control plane use (MachineDeployment and KCP
	// controllers); a pool's own LibvirtCluster stays unowned, as labctl's
	// provider leaves it, and so do the hosts' credentials Secrets.
	cl := get(t, c, "cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1")
	for _, o := range r.Objects {
		switch {
		case o.GetKind() == "Namespace", o.GetKind() == "Cluster", o.GetKind() == "Secret", o.GetKind() == "LibvirtCluster" && o.GetName() != "lab1":
			continue
		}
		live := get(t, c, o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
		ownedBy(live, cl)
		if err := c.Update(ctx, live); err != nil {
			t.Fatalf("owner of %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	kcp := get(t, c, "controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "lab1", r.ControlPlane)
	pxc := get(t, c, "infrastructure.cluster.x-k8s.io/v1alpha2", "ProxmoxCluster", "lab1", "lab1")
	ca := obj("v1", "Secret", "lab1", "lab1-ca") // no owner: clusterctl finds it by its name
	_ = unstructured.SetNestedStringMap(ca.Object, map[string]string{"tls.key": base64.StdEncoding.EncodeToString([]byte(caKey))}, "data")
	create(t, c, ca)
	kcfg := obj("v1", "Secret", "lab1", "lab1-kubeconfig")
	ownedBy(kcfg, cl)
	_ = unstructured.SetNestedStringMap(kcfg.Object, map[string]string{"value": base64.StdEncoding.EncodeToString([]byte("kubeconfig of lab1"))}, "data")
	create(t, c, kcfg)
	pool := obj("ipam.cluster.x-k8s.io/v1alpha2", "InClusterIPPool", "lab1", "lab1-v4-icip") // CAPMOX's
	ownedBy(pool, pxc)
	_ = unstructured.SetNestedMap(pool.Object, map[string]any{"addresses": []any{"127.77.0.40-127.77.0.59"}, "prefix": int64(24), "gateway": "127.77.0.1"}, "spec")
	create(t, c, pool)

	for _, p := range r.Pools {
		md := get(t, c, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", p.MachineDeployment)
		tmplName, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "infrastructureRef", "name")
		ms := obj("cluster.x-k8s.io/v1beta2", "MachineSet", "lab1", md.GetName()+"-x7k2p")
		ownedBy(ms, md)
		mdSpec, _, _ := unstructured.NestedMap(md.Object, "spec")
		_ = unstructured.SetNestedMap(ms.Object, map[string]any{"clusterName": "lab1", "replicas": int64(1), "selector": mdSpec["selector"], "template": mdSpec["template"]}, "spec")
		create(t, c, ms)
		name := ms.GetName() + "-9qz4t"
		m := obj("cluster.x-k8s.io/v1beta2", "Machine", "lab1", name)
		ownedBy(m, ms)
		m.SetLabels(map[string]string{clusterapi.ClusterNameLabel: "lab1", clusterapi.DeploymentNameLabel: md.GetName()})
		infraKind := p.Kind[:len(p.Kind)-len("Template")]
		providerID := "proxmox://4c4c4544-0042-3510-8052-b4c04f4e3332"
		if infraKind == "LibvirtMachine" {
			providerID = "libvirt://kvm1/" + s.libvirtID
		}
		_ = unstructured.SetNestedMap(m.Object, map[string]any{"clusterName": "lab1", "version": "v1.35.4", "providerID": providerID,
			"bootstrap":         map[string]any{"configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}, "dataSecretName": name},
			"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": infraKind, "name": name}}, "spec")
		create(t, c, m)
		setStatus(t, c, m, map[string]any{"phase": "Running", "nodeRef": map[string]any{"name": name}})

		kc := obj("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "lab1", name)
		ownedBy(kc, m)
		create(t, c, kc)
		data := obj("v1", "Secret", "lab1", name)
		ownedBy(data, kc)
		_ = unstructured.SetNestedStringMap(data.Object, map[string]string{"value": base64.StdEncoding.EncodeToString([]byte("#cloud-config\n"))}, "data")
		create(t, c, data)

		infraAPI := "infrastructure.cluster.x-k8s.io/v1alpha2"
		if infraKind == "LibvirtMachine" {
			infraAPI = "infrastructure.labctl.dev/v1alpha1"
		}
		tmpl := get(t, c, infraAPI, p.Kind, "lab1", tmplName)
		im := obj(infraAPI, infraKind, "lab1", name)
		ownedBy(im, m)
		spec := specOf(t, tmpl)
		spec["providerID"] = providerID
		if infraKind == "ProxmoxMachine" {
			spec["virtualMachineID"] = s.vmid
		}
		im.Object["spec"] = spec
		create(t, c, im)

		claim := obj("ipam.cluster.x-k8s.io/v1beta2", "IPAddressClaim", "lab1", name)
		ownedBy(claim, im)
		_ = unstructured.SetNestedMap(claim.Object, map[string]any{"poolRef": map[string]any{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool.GetName()}}, "spec")
		create(t, c, claim)
		addr := obj("ipam.cluster.x-k8s.io/v1beta2", "IPAddress", "lab1", name)
		ownedBy(addr, claim, pool) // in-cluster IPAM owns it by claim and pool
		ip := "127.77.0.40"
		if infraKind == "LibvirtMachine" {
			ip = "127.77.0.41"
		}
		_ = unstructured.SetNestedMap(addr.Object, map[string]any{"address": ip, "prefix": int64(24), "gateway": "127.77.0.1",
			"claimRef": map[string]any{"name": name}, "poolRef": map[string]any{"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": pool.GetName()}}, "spec")
		create(t, c, addr)
	}
	_ = kcp
	setStatus(t, c, cl, map[string]any{
		"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true},
		"conditions":     []any{map[string]any{"type": "ControlPlaneInitialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z"}},
	})
	return s
}

func testIO() (*ui.IO, *bytes.Buffer, *bytes.Buffer) {
	io, _, out, errb := ui.Test()
	return io, out, errb
}

func fixed(p string) func() (string, error) { return func() (string, error) { return p, nil } }

func noSecrets(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range []string{pveSecret, "provider-key-material", "MIIEow-not-a-real-key", pass, base64.StdEncoding.EncodeToString([]byte(pveSecret))} {
		if strings.Contains(text, s) {
			t.Errorf("%s shows a secret (%q):\n%s", what, s, text)
		}
	}
}

// TestBackupAndRestoreBetweenTwoAPIServers backs lab1 up from one real
// API server with clusterctl's move, restores it onto a second with the
// same, and checks what a user relies on: the source runs on unpaused;
// the target holds the same machines with the same VM ids, providerIDs,
// addresses and certificate Secrets (so the providers adopt the VMs);
// labctl's parts; the autoscaler only once the Machines are adopted; a
// re-run resumes; a target that already manages lab1 is refused.
func TestBackupAndRestoreBetweenTwoAPIServers(t *testing.T) {
	src := startSource(t)
	_, dc, dkc := mgmtEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	file := filepath.Join(t.TempDir(), "lab.age")

	io, out, errb := testIO()
	if err := Backup(ctx, Options{IO: io, Lab: "home", Mgmt: func(context.Context) (*kube.Client, error) { return src.kc, nil },
		File: file, DryRun: true}); err != nil {
		t.Fatalf("backup --dry-run: %v\n%s", err, errb)
	}
	for _, want := range []string{"clusterctl move of namespace lab1", "Cluster lab1/lab1", "Machine lab1/lab1-workers-x7k2p-9qz4t", "LibvirtMachine lab1/lab1-kvm-x7k2p-9qz4t",
		"IPAddress lab1/lab1-kvm-x7k2p-9qz4t", "Secret lab1/lab1-ca", "Secret_capmox-system_proxmox-variables", "Namespace__capmox-system", "Deployment_lab1_cluster-autoscaler", "Secret_lab1_lab1-libvirt-kvm1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("backup --dry-run lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("backup --dry-run wrote the file")
	}
	noSecrets(t, "backup --dry-run", out.String()+errb.String())

	io, out, errb = testIO()
	if err := Backup(ctx, Options{IO: io, Lab: "home", Mgmt: func(context.Context) (*kube.Client, error) { return src.kc, nil },
		File: file, Passphrase: fixed(pass), workFactor: testWorkFactor}); err != nil {
		t.Fatalf("backup: %v\n%s", err, errb)
	}
	t.Logf("backup:\n%s", errb)
	noSecrets(t, "backup", out.String()+errb.String())
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, %v", fi, err)
	}
	cl := get(t, src.c, "cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1")
	if p, _, _ := unstructured.NestedBool(cl.Object, "spec", "paused"); p {
		t.Error("the source's Cluster lab1 is left paused after the backup")
	}
	before, _ := os.ReadFile(file)
	if err := Backup(ctx, Options{IO: io, Lab: "home", Mgmt: func(context.Context) (*kube.Client, error) { return src.kc, nil },
		File: file, Passphrase: fixed(pass), workFactor: testWorkFactor}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a second backup to the same file: %v, want a refusal", err)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(before, after) {
		t.Error("the refused second backup changed the file")
	}

	target := func(context.Context) (*kube.Client, error) { return dkc, nil }
	io, out, errb = testIO()
	if err := Restore(ctx, RestoreOptions{IO: io, Mgmt: target, File: file, DryRun: true, Passphrase: fixed(pass)}); err != nil {
		t.Fatalf("restore --dry-run: %v\n%s", err, errb)
	}
	for _, want := range []string{"would create Secret capmox-system/proxmox-variables", "would create Secret lab1/lab1-libvirt-kvm1", "would create Namespace lab1", "would create LibvirtCluster lab1/lab1-kvm",
		"Machine_lab1_lab1-kvm-x7k2p-9qz4t", "Cluster_lab1_lab1", "would create Deployment lab1/cluster-autoscaler"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("restore --dry-run lacks %q:\n%s", want, out)
		}
	}
	noSecrets(t, "restore --dry-run", out.String()+errb.String())
	var nss unstructured.UnstructuredList
	nss.SetAPIVersion("v1")
	nss.SetKind("NamespaceList")
	if err := dc.List(ctx, &nss); err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss.Items {
		if ns.GetName() == "lab1" || ns.GetName() == "capmox-system" {
			t.Errorf("restore --dry-run made namespace %s", ns.GetName())
		}
	}

	// Cluster API's Machine controller, standing in: it sets a Machine's
	// nodeRef once it finds the Node of the Machine's providerID, some
	// time after the Machine appears. It notes whether the autoscaler was
	// there before every Machine was adopted.
	adopt := &adopter{c: dc}
	go adopt.run(ctx)

	io, out, errb = testIO()
	if err := Restore(ctx, RestoreOptions{IO: io, Mgmt: target, File: file, Passphrase: fixed(pass), AdoptTimeout: 2 * time.Minute}); err != nil {
		t.Fatalf("restore: %v\n%s", err, errb)
	}
	t.Logf("restore:\n%s", errb)
	noSecrets(t, "restore", out.String()+errb.String())
	if adopt.autoscalerEarly() {
		t.Error("the autoscaler was restored before every Machine had its Node again")
	}

	t.Run("the same machines, VMs and addresses", func(t *testing.T) {
		tcl := get(t, dc, "cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1")
		if p, _, _ := unstructured.NestedBool(tcl.Object, "spec", "paused"); p {
			t.Error("the restored Cluster is paused")
		}
		if tcl.GetAnnotations()[RestoredFromAnnotation] == "" {
			t.Errorf("the restored Cluster lacks %s", RestoredFromAnnotation)
		}
		for _, p := range src.rendered.Pools {
			name := p.MachineDeployment + "-x7k2p-9qz4t"
			sm := get(t, src.c, "cluster.x-k8s.io/v1beta2", "Machine", "lab1", name)
			tm := get(t, dc, "cluster.x-k8s.io/v1beta2", "Machine", "lab1", name)
			if !reflect.DeepEqual(sm.Object["spec"], tm.Object["spec"]) {
				t.Errorf("Machine %s spec differs:\nsource %v\ntarget %v", name, sm.Object["spec"], tm.Object["spec"])
			}
			tms := get(t, dc, "cluster.x-k8s.io/v1beta2", "MachineSet", "lab1", p.MachineDeployment+"-x7k2p")
			if refs := tm.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != tms.GetUID() || refs[0].UID == sm.GetOwnerReferences()[0].UID {
				t.Errorf("Machine %s owner = %v, want the target's MachineSet %s", name, refs, tms.GetUID())
			}
			infraKind, _, _ := unstructured.NestedString(tm.Object, "spec", "infrastructureRef", "kind")
			api := "infrastructure.cluster.x-k8s.io/v1alpha2"
			if infraKind == "LibvirtMachine" {
				api = "infrastructure.labctl.dev/v1alpha1"
			}
			si, ti := get(t, src.c, api, infraKind, "lab1", name), get(t, dc, api, infraKind, "lab1", name)
			if !reflect.DeepEqual(si.Object["spec"], ti.Object["spec"]) {
				t.Errorf("%s %s spec differs:\nsource %v\ntarget %v", infraKind, name, si.Object["spec"], ti.Object["spec"])
			}
			if id, _, _ := unstructured.NestedInt64(ti.Object, "spec", "virtualMachineID"); infraKind == "ProxmoxMachine" && id != src.vmid {
				t.Errorf("ProxmoxMachine %s virtualMachineID = %d, want VM %d", name, id, src.vmid)
			}
			if pid, _, _ := unstructured.NestedString(ti.Object, "spec", "providerID"); infraKind == "LibvirtMachine" && !strings.HasSuffix(pid, src.libvirtID) {
				t.Errorf("LibvirtMachine %s providerID = %q, want its domain %s", name, pid, src.libvirtID)
			}
			sa, ta := get(t, src.c, "ipam.cluster.x-k8s.io/v1beta2", "IPAddress", "lab1", name), get(t, dc, "ipam.cluster.x-k8s.io/v1beta2", "IPAddress", "lab1", name)
			if !reflect.DeepEqual(sa.Object["spec"], ta.Object["spec"]) {
				t.Errorf("IPAddress %s differs: %v, want %v", name, ta.Object["spec"], sa.Object["spec"])
			}
		}
		for _, n := range []string{"lab1-ca", "lab1-kubeconfig", "lab1-libvirt-kvm1"} {
			s, d := get(t, src.c, "v1", "Secret", "lab1", n), get(t, dc, "v1", "Secret", "lab1", n)
			if !reflect.DeepEqual(s.Object["data"], d.Object["data"]) {
				t.Errorf("Secret %s differs on the target", n)
			}
		}
		ps := get(t, dc, "v1", "Secret", "capmox-system", "proxmox-variables")
		if v, _, _ := unstructured.NestedString(ps.Object, "data", "PROXMOX_SECRET"); v != base64.StdEncoding.EncodeToString([]byte(pveSecret)) {
			t.Error("the provider's configSecret was not restored as it was")
		}
		if lc := get(t, dc, "infrastructure.labctl.dev/v1alpha1", "LibvirtCluster", "lab1", "lab1-kvm"); !reflect.DeepEqual(lc.Object["spec"], get(t, src.c, "infrastructure.labctl.dev/v1alpha1", "LibvirtCluster", "lab1", "lab1-kvm").Object["spec"]) {
			t.Error("the KVM pool's LibvirtCluster differs on the target")
		}
		ns := get(t, dc, "v1", "Namespace", "", "lab1")
		if ns.GetLabels()[clusterapi.LabelManagedBy] != clusterapi.ManagedBy {
			t.Errorf("namespace lab1 labels = %v, want labctl's", ns.GetLabels())
		}
	})

	t.Run("the autoscaler as labctl rendered it", func(t *testing.T) {
		sd, td := get(t, src.c, "apps/v1", "Deployment", "lab1", "cluster-autoscaler"), get(t, dc, "apps/v1", "Deployment", "lab1", "cluster-autoscaler")
		if !reflect.DeepEqual(sd.Object["spec"], td.Object["spec"]) {
			t.Errorf("autoscaler Deployment spec differs:\nsource %v\ntarget %v", sd.Object["spec"], td.Object["spec"])
		}
		get(t, dc, "v1", "ServiceAccount", "lab1", "cluster-autoscaler")
		crb := get(t, dc, "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "labctl-cluster-autoscaler-lab1")
		if n, _, _ := unstructured.NestedString(crb.Object, "roleRef", "name"); n != clusterapi.SharedClusterRole {
			t.Errorf("ClusterRoleBinding binds %q", n)
		}
	})

	t.Run("a re-run resumes and changes nothing", func(t *testing.T) {
		rv := get(t, dc, "cluster.x-k8s.io/v1beta2", "Machine", "lab1", "lab1-workers-x7k2p-9qz4t").GetResourceVersion()
		io, _, errb := testIO()
		if err := Restore(ctx, RestoreOptions{IO: io, Mgmt: target, File: file, Passphrase: fixed(pass), AdoptTimeout: time.Minute}); err != nil {
			t.Fatalf("second restore: %v\n%s", err, errb)
		}
		if !strings.Contains(errb.String(), "resuming") {
			t.Errorf("the second restore did not say it resumes:\n%s", errb)
		}
		if got := get(t, dc, "cluster.x-k8s.io/v1beta2", "Machine", "lab1", "lab1-workers-x7k2p-9qz4t").GetResourceVersion(); got != rv {
			t.Errorf("the second restore changed Machine lab1-workers-x7k2p-9qz4t")
		}
	})

	t.Run("a target that already manages lab1 is refused", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "again.age")
		io, _, errb := testIO()
		if err := Backup(ctx, Options{IO: io, Lab: "home", Mgmt: func(context.Context) (*kube.Client, error) { return src.kc, nil },
			File: other, Passphrase: fixed(pass), workFactor: testWorkFactor}); err != nil {
			t.Fatalf("backup: %v\n%s", err, errb)
		}
		err := Restore(ctx, RestoreOptions{IO: io, Mgmt: target, File: other, Passphrase: fixed(pass)})
		if err == nil || !strings.Contains(err.Error(), "already manages Cluster lab1/lab1") {
			t.Fatalf("restore onto a target with lab1: %v, want a refusal naming it", err)
		}
	})

	t.Run("a wrong passphrase is refused before the target is touched", func(t *testing.T) {
		io, _, _ := testIO()
		err := Restore(ctx, RestoreOptions{IO: io, Mgmt: func(context.Context) (*kube.Client, error) {
			t.Error("connected to the target with a wrong passphrase")
			return dkc, nil
		}, File: file, Passphrase: fixed("not it")})
		if err == nil || !strings.Contains(err.Error(), "wrong passphrase") {
			t.Fatalf("restore with a wrong passphrase: %v", err)
		}
	})

	// Last: they pause and fail on the source.
	t.Run("a failed backup leaves the source unpaused", func(t *testing.T) { failedBackupLeavesTheSourceUnpaused(ctx, t, src) })
	t.Run("a paused cluster is refused", func(t *testing.T) { backupRefusesAPausedCluster(ctx, t, src) })
}

// adopter stands in for Cluster API's Machine controller on the target:
// it sets each Machine's nodeRef a moment after the Machine appears (the
// real controller does once it reads the Node of its providerID in the
// workload cluster).
type adopter struct {
	c     client.Client
	mu    sync.Mutex
	early bool
}

func (a *adopter) run(ctx context.Context) {
	for ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		var ms unstructured.UnstructuredList
		ms.SetGroupVersionKind(schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineList"})
		if err := a.c.List(ctx, &ms, client.InNamespace("lab1")); err != nil || len(ms.Items) == 0 {
			continue
		}
		dep := obj("apps/v1", "Deployment", "lab1", "cluster-autoscaler")
		depErr := a.c.Get(ctx, client.ObjectKeyFromObject(dep), dep)
		for i := range ms.Items {
			m := &ms.Items[i]
			if n, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); n != "" {
				continue
			}
			if depErr == nil {
				a.mu.Lock()
				a.early = true
				a.mu.Unlock()
			}
			m.Object["status"] = map[string]any{"phase": "Running", "nodeRef": map[string]any{"name": m.GetName()}}
			_ = a.c.Status().Update(ctx, m)
		}
	}
}

func (a *adopter) autoscalerEarly() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.early
}

// failedBackupLeavesTheSourceUnpaused: when clusterctl stops after it
// paused the Clusters (here: a folder in the way of a file it must write,
// which it retries for minutes, then Ctrl-C), the backup still unpauses
// them and says so.
func failedBackupLeavesTheSourceUnpaused(ctx context.Context, t *testing.T, src *source) {
	m, err := newMover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// clusterctl writes Cluster_lab1_lab1.yaml after pausing; a non-empty
	// folder of that name can be neither removed nor written.
	if err := os.MkdirAll(filepath.Join(dir, "Cluster_lab1_lab1.yaml", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	ictx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	go func() {
		// Ctrl-C once clusterctl holds the Cluster paused.
		for ictx.Err() == nil {
			cl := obj("cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1")
			if err := src.c.Get(ictx, client.ObjectKeyFromObject(cl), cl); err == nil {
				if p, _, _ := unstructured.NestedBool(cl.Object, "spec", "paused"); p {
					time.Sleep(time.Second)
					interrupt()
					return
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	err = saveNamespace(ictx, src.kc, m, "lab1", dir, []ClusterRef{{Namespace: "lab1", Name: "lab1"}}, func(string) {})
	if err == nil {
		t.Fatal("saveNamespace succeeded over a folder in the way")
	}
	if !strings.Contains(err.Error(), "Cluster lab1/lab1 unpaused again") {
		t.Errorf("error %q does not say the Cluster was unpaused", err)
	}
	cl := get(t, src.c, "cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1")
	if p, _, _ := unstructured.NestedBool(cl.Object, "spec", "paused"); p {
		t.Error("the source's Cluster lab1 is left paused")
	}
}

// backupRefusesAPausedCluster: a Cluster someone else paused is
// refused by name, and stays paused.
func backupRefusesAPausedCluster(ctx context.Context, t *testing.T, src *source) {
	cl := get(t, src.c, "cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1")
	if err := src.c.Patch(ctx, cl, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))); err != nil {
		t.Fatal(err)
	}
	io, _, _ := testIO()
	file := filepath.Join(t.TempDir(), "lab.age")
	err := Backup(ctx, Options{IO: io, Lab: "home", Mgmt: func(context.Context) (*kube.Client, error) { return src.kc, nil }, File: file, Passphrase: fixed(pass), workFactor: testWorkFactor})
	if err == nil || !strings.Contains(err.Error(), "Cluster lab1/lab1 is paused") {
		t.Fatalf("backup of a paused cluster: %v", err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("a refused backup left a file")
	}
	cl = get(t, src.c, "cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1")
	if p, _, _ := unstructured.NestedBool(cl.Object, "spec", "paused"); !p {
		t.Error("the backup unpaused a Cluster it had not paused")
	}
}

// hostFiles stands in for the files lab-mixed.yaml names: the owner's
// key, kvm1's ssh key and kvm2's TLS client certificate.
type hostFiles struct{}

func (hostFiles) SSHKeys() ([]string, error) { return []string{ownerKey}, nil }

func (hostFiles) Host(h *config.Hypervisor) (map[string][]byte, error) {
	if strings.HasPrefix(h.Libvirt.URI, "qemu+tls") {
		return map[string][]byte{"tls.crt": []byte("client certificate"), "tls.key": []byte(sshKey)}, nil
	}
	return map[string][]byte{"ssh-privatekey": []byte(sshKey)}, nil
}

// On a management cluster whose provider CRDs lack the operator's label
// (providers installed some other way: the box before its CRDs were
// labelled), clusterctl's move found no kind to save, reported no error,
// and the backup held no object of lab1 (found in the box: the restore
// then made 0 objects and waited for no Machine). The backup now checks
// that clusterctl saved each Cluster, and names the label.
func TestBackupChecksClusterctlSavedEachCluster(t *testing.T) {
	lab1 := []ClusterRef{{Namespace: "lab1", Name: "lab1"}}
	a := &Archive{Files: map[string][]byte{clusterctlTo + "/lab1/ProxmoxMachine_lab1_lab1-x.yaml": []byte("{}")}}
	err := sawClusters(a, "lab1", lab1)
	if err == nil || !strings.Contains(err.Error(), "clusterctl saved no Cluster lab1/lab1") || !strings.Contains(err.Error(), "kubectl get crd -l "+testbed.ClusterctlLabel) {
		t.Fatalf("no Cluster file saved: %v, want an error naming lab1 and the label", err)
	}
	a.Files[clusterctlTo+"/lab1/Cluster_lab1_lab1.yaml"] = []byte("{}")
	if err := sawClusters(a, "lab1", lab1); err != nil {
		t.Fatalf("with clusterctl's Cluster_lab1_lab1.yaml: %v", err)
	}
}

// TestBackupLeavesTenantsOutOnlyWhenAsked: a tenant whose control plane
// the backup cannot take (here Kamaji has made none) fails the backup,
// naming it, with no file left; --skip-tenants backs up the rest, the file
// says which tenants it lacks, and a restore says so.
func TestBackupLeavesTenantsOutOnlyWhenAsked(t *testing.T) {
	src := startSource(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// A tenant: the KamajiControlPlane is its control plane. (No
	// topology: clusterctl would look for its ClusterClass, which this
	// API server lacks, before the tenants part is reached.)
	create(t, src.c, obj("v1", "Namespace", "", "tenant1"))
	tenant := obj("cluster.x-k8s.io/v1beta2", "Cluster", "tenant1", "tenant1")
	_ = unstructured.SetNestedMap(tenant.Object, map[string]any{
		"controlPlaneRef": map[string]any{"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KamajiControlPlane", "name": "tenant1-abcde"},
	}, "spec")
	tenant = create(t, src.c, tenant)
	setStatus(t, src.c, tenant, map[string]any{
		"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true},
	})
	mgmt := func(context.Context) (*kube.Client, error) { return src.kc, nil }
	file := filepath.Join(t.TempDir(), "lab.age")

	io, _, errb := testIO()
	err := Backup(ctx, Options{IO: io, Lab: "home", Mgmt: mgmt, File: file, Passphrase: fixed(pass), workFactor: testWorkFactor})
	// clusterctl stops first here: the KamajiControlPlane's kind is not
	// served on this API server, so the control plane is not initialized.
	if err == nil || !strings.Contains(err.Error(), "tenant1/tenant1") {
		t.Fatalf("backup of a lab with a tenant whose control plane Kamaji has not made = %v, want an error naming it\n%s", err, errb)
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("the refused backup wrote the file")
	}
	// The tenants part names what it lacks, and the way out.
	if _, err := (tenantControlPlanes{}).Backup(ctx, src.kc, []ClusterRef{{Namespace: "tenant1", Name: "tenant1"}}); err == nil ||
		!strings.Contains(err.Error(), "tenant tenant1/tenant1: Kamaji has no TenantControlPlane tenant1-abcde") || !strings.Contains(err.Error(), "--skip-tenants") {
		t.Errorf("the tenants part for a tenant without a TenantControlPlane = %v, want an error naming it and --skip-tenants", err)
	}

	io, out, errb := testIO()
	if err := Backup(ctx, Options{IO: io, Lab: "home", Mgmt: mgmt, File: file, DryRun: true, SkipTenants: true}); err != nil {
		t.Fatalf("backup --dry-run --skip-tenants: %v\n%s", err, errb)
	}
	if !strings.Contains(out.String(), "clusterctl move of namespace lab1") || strings.Contains(out.String(), "namespace tenant1") ||
		!strings.Contains(errb.String(), "leaving out Kamaji tenant(s) tenant1/tenant1 (--skip-tenants)") {
		t.Errorf("backup --dry-run --skip-tenants:\n%s\n%s", out, errb)
	}

	io, _, errb = testIO()
	if err := Backup(ctx, Options{IO: io, Lab: "home", Mgmt: mgmt, File: file, SkipTenants: true, Passphrase: fixed(pass), workFactor: testWorkFactor}); err != nil {
		t.Fatalf("backup --skip-tenants: %v\n%s", err, errb)
	}
	a, err := readArchive(file, pass)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(a.Manifest.Clusters, a.Manifest.SkippedTenants); got != "[lab1/lab1] [tenant1/tenant1]" {
		t.Errorf("the backup's clusters and skipped tenants = %s", got)
	}
	for name := range a.Files {
		if strings.Contains(name, "tenant1") {
			t.Errorf("the backup holds %s of the tenant it left out", name)
		}
	}

	_, _, dkc := mgmtEnv(t)
	io, _, errb = testIO()
	if err := Restore(ctx, RestoreOptions{IO: io, Mgmt: func(context.Context) (*kube.Client, error) { return dkc, nil }, File: file, DryRun: true, Passphrase: fixed(pass)}); err != nil {
		t.Fatalf("restore --dry-run: %v\n%s", err, errb)
	}
	if !strings.Contains(errb.String(), "not in this backup: Kamaji tenant(s) tenant1/tenant1 (taken with --skip-tenants)") {
		t.Errorf("restore --dry-run does not say the tenant is missing:\n%s", errb)
	}
}
