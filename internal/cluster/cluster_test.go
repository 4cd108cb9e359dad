package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/cluster"
	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/helm"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed"
	"github.com/labctl/labctl/internal/testing/testbed/standin"
	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

const ownerKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"

func newClient(t *testing.T, env *testbed.Env) client.Client {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func get(t *testing.T, c client.Client, apiVersion, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		t.Fatalf("reading %s %s/%s: %v", kind, ns, name, err)
	}
	return u
}

// standInCAPI plays Cluster API's controllers for the test, as no
// controllers run on the test bed: once the Cluster exists it marks the
// infrastructure provisioned, then the control plane initialized, then
// writes the <cluster>-kubeconfig secret pointing at a second test-bed API
// server that stands in for the workload cluster.
func standInCAPI(ctx context.Context, t *testing.T, c client.Client, ns, name string, workloadKubeconfig []byte) {
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cl := &unstructured.Unstructured{}
			cl.SetGroupVersionKind(clusterapi.ClusterGVK)
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cl); err != nil {
				continue
			}
			_ = unstructured.SetNestedField(cl.Object, true, "status", "initialization", "infrastructureProvisioned")
			_ = unstructured.SetNestedField(cl.Object, "Provisioning", "status", "phase")
			if err := c.Status().Update(ctx, cl); err != nil {
				continue
			}
			time.Sleep(200 * time.Millisecond)
			_ = unstructured.SetNestedField(cl.Object, true, "status", "initialization", "controlPlaneInitialized")
			_ = unstructured.SetNestedField(cl.Object, "Provisioned", "status", "phase")
			if err := c.Status().Update(ctx, cl); err != nil {
				continue
			}
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-kubeconfig",
				Labels: map[string]string{clusterapi.ClusterNameLabel: name}},
				Type: "cluster.x-k8s.io/secret", Data: map[string][]byte{"value": workloadKubeconfig}}
			if err := c.Create(ctx, sec); err != nil && !strings.Contains(err.Error(), "already exists") {
				t.Errorf("stand-in CAPI: creating the kubeconfig secret: %v", err)
			}
			return
		}
	}()
}

// TestCreateScaleListDeleteAgainstRealAPI runs every cluster command
// against a real API server with the pinned CRDs. Stand-ins play what
// cannot run here: Cluster API's controllers (standInCAPI), the workload
// cluster (a second test-bed API server), Cilium's chart (served on
// loopback, installed with the real Helm SDK) and the autoscaler.
func TestCreateScaleListDeleteAgainstRealAPI(t *testing.T) {
	mgmtEnv := testbed.Start(t, testbed.WithCRDs("capi", "capmox", "ipam"))
	workload := testbed.Start(t) // stands in for the workload cluster
	wkc, err := os.ReadFile(workload.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	mc := newClient(t, mgmtEnv)
	mgmt, err := kube.Connect(mgmtEnv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	lab, _, err := config.Load(context.Background(), config.Request{Path: "../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	pins := versions.MustGet()
	repo := standin.ServeRepo(t, standin.UpstreamChart(t, t.TempDir(), standin.Cilium))
	lab.Management.Stack.ChartRepos.Cilium = repo.URL
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	standInCAPI(ctx, t, mc, "lab1", "lab1", wkc)
	// What 'labctl mgmt install' leaves for every autoscaler to bind to
	// (its rules are the mgmt tests' business).
	sharedRole := &unstructured.Unstructured{}
	sharedRole.SetAPIVersion("rbac.authorization.k8s.io/v1")
	sharedRole.SetKind("ClusterRole")
	sharedRole.SetName(clusterapi.SharedClusterRole)
	if err := mc.Create(ctx, sharedRole); err != nil {
		t.Fatal(err)
	}

	io, _, out, errb := ui.Test()
	io.InTTY, io.ErrTTY = true, true
	dir := t.TempDir()
	opts := cluster.Options{IO: io, Lab: lab, Name: "lab1", Mgmt: mgmt,
		KubeconfigDir: dir, Timeout: time.Minute, Verbose: 1}
	began := time.Now()
	if err := cluster.Create(ctx, opts); err != nil {
		t.Fatalf("create: %v\n%s", err, errb.String())
	}
	t.Logf("create output:\n%s", errb.String())
	realSteps := ui.Started(errb.String())
	t.Logf("create took %s against the stand-in controllers", time.Since(began).Round(time.Millisecond))
	for _, want := range []string{"apply cluster lab1", "wait for infrastructure provisioned", "wait for control plane initialized",
		"wait for kubeconfig secret lab1-kubeconfig", "install Cilium " + pins.Cilium, "apply cluster-autoscaler"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("create output lacks %q:\n%s", want, errb.String())
		}
	}
	assertNoSecret(t, wkc, out.String()+errb.String())

	path := filepath.Join(dir, "lab1.kubeconfig")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600", fi.Mode().Perm())
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, wkc) {
		t.Error("written kubeconfig differs from the secret's")
	}

	t.Run("Cilium installed with the Helm SDK into the workload cluster", func(t *testing.T) {
		st, err := helm.New(workload.Config).State(ctx, "cilium", "kube-system")
		if err != nil {
			t.Fatal(err)
		}
		if !st.Found || st.Status != "deployed" || st.ChartVersion != pins.Cilium || st.Revision != 1 {
			t.Fatalf("cilium release = %+v, want revision 1 of chart %s deployed", st, pins.Cilium)
		}
		want := map[string]any{"ipam": map[string]any{"mode": "kubernetes"}, "ipv4NativeRoutingCIDR": "10.244.0.0/16",
			"k8sServiceHost": lab.Clusters[0].ControlPlane.Endpoint, "k8sServicePort": float64(6443), "operator": map[string]any{"replicas": float64(1), "nodeSelector": map[string]any{clusterapi.ControlPlaneRoleLabel: ""}}}
		if got := mustJSONRoundTrip(t, st.Values); !reflect.DeepEqual(got, want) {
			t.Errorf("release values = %v, want %v", got, want)
		}
		if repo.Requests() != 1 {
			t.Errorf("chart downloads = %d, want 1", repo.Requests())
		}
		// What the real chart rendered from those values, in the
		// workload cluster.
		wc := newClient(t, workload)
		cm := get(t, wc, "v1", "ConfigMap", "kube-system", "cilium-config")
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		for k, v := range map[string]string{"ipam": "kubernetes", "ipv4-native-routing-cidr": "10.244.0.0/16"} {
			if data[k] != v {
				t.Errorf("cilium-config %s = %q, want %q", k, data[k], v)
			}
		}
		if _, ok := data["cluster-pool-ipv4-cidr"]; ok {
			t.Errorf("cilium-config has a cluster-pool CIDR with kubernetes IPAM: %v", data)
		}
		// The agent reaches the API server at the VIP, not through the
		// kubernetes Service it has yet to make work.
		ds := get(t, wc, "apps/v1", "DaemonSet", "kube-system", "cilium")
		env := containerEnv(ds)
		if h, p := env["cilium-agent KUBERNETES_SERVICE_HOST"], env["cilium-agent KUBERNETES_SERVICE_PORT"]; h != lab.Clusters[0].ControlPlane.Endpoint || fmt.Sprint(p) != "6443" {
			t.Errorf("the Cilium agent reaches the API server at %v:%v, want %s:6443", h, p, lab.Clusters[0].ControlPlane.Endpoint)
		}
		op := get(t, wc, "apps/v1", "Deployment", "kube-system", "cilium-operator")
		if n, _, _ := unstructured.NestedInt64(op.Object, "spec", "replicas"); n != 1 {
			t.Errorf("cilium-operator replicas = %d, want 1", n)
		}
		if sel, _, _ := unstructured.NestedStringMap(op.Object, "spec", "template", "spec", "nodeSelector"); sel[clusterapi.ControlPlaneRoleLabel] != "" || len(sel) == 0 {
			t.Errorf("cilium-operator nodeSelector = %v, want the control-plane role", sel)
		}
	})

	t.Run("autoscaler as applied", func(t *testing.T) {
		dep := get(t, mc, "apps/v1", "Deployment", "lab1", "cluster-autoscaler")
		pod, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
		ctr := pod["containers"].([]any)[0].(map[string]any)
		args := strings.Join(toStrings(ctr["args"]), " ")
		for _, want := range []string{"--cloud-provider=clusterapi", "--clusterapi-cloud-config-authoritative",
			"--node-group-auto-discovery=clusterapi:namespace=lab1,clusterName=lab1", "--startup-taint=node.cilium.io/agent-not-ready",
			"--kubeconfig=/etc/kubernetes/workload/value", "--scale-down-unneeded-time=1m", "--scale-down-utilization-threshold=0.5"} {
			if !strings.Contains(args, want) {
				t.Errorf("autoscaler args lack %s: %s", want, args)
			}
		}
		vol := pod["volumes"].([]any)[0].(map[string]any)
		if sn, _, _ := unstructured.NestedString(vol, "secret", "secretName"); sn != "lab1-kubeconfig" {
			t.Errorf("autoscaler volume = %v, want the lab1-kubeconfig secret", vol)
		}
		mount := ctr["volumeMounts"].([]any)[0].(map[string]any)
		if mount["mountPath"] != "/etc/kubernetes/workload" || mount["name"] != vol["name"] {
			t.Errorf("autoscaler mount = %v", mount)
		}
		if pod["serviceAccountName"] != "cluster-autoscaler" {
			t.Errorf("serviceAccountName = %v", pod["serviceAccountName"])
		}
		crb := get(t, mc, "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "labctl-cluster-autoscaler-lab1")
		if n, _, _ := unstructured.NestedString(crb.Object, "roleRef", "name"); n != clusterapi.SharedClusterRole {
			t.Errorf("ClusterRoleBinding binds %s, want the shared %s", n, clusterapi.SharedClusterRole)
		}
		subj := crb.Object["subjects"].([]any)[0].(map[string]any)
		if subj["name"] != "cluster-autoscaler" || subj["namespace"] != "lab1" {
			t.Errorf("ClusterRoleBinding subject = %v", subj)
		}
	})

	// A stand-in autoscaler scales the pool, as cluster-autoscaler does
	// through the scale subresource with its own field manager.
	md := get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers")
	_ = unstructured.SetNestedField(md.Object, int64(3), "spec", "replicas")
	if err := mc.Update(ctx, md, client.FieldOwner("cluster-autoscaler")); err != nil {
		t.Fatalf("stand-in autoscaler: %v", err)
	}

	t.Run("re-create changes nothing", func(t *testing.T) {
		r, err := cluster.Render(lab, "lab1", nil)
		if err != nil {
			t.Fatal(err)
		}
		objs := append(append([]*unstructured.Unstructured{}, r.Objects...), r.Autoscaler...)
		before := rvs(t, mc, objs)
		errb.Reset()
		began := time.Now()
		if err := cluster.Create(ctx, opts); err != nil {
			t.Fatalf("second create: %v\n%s", err, errb.String())
		}
		t.Logf("no-op re-create took %s", time.Since(began).Round(time.Millisecond))
		if after := rvs(t, mc, objs); !mapsEqual(before, after) {
			t.Errorf("re-running create changed objects:\nbefore %v\nafter  %v", before, after)
		}
		if n := strings.Count(errb.String(), "up to date"); n != 4 {
			t.Errorf("second create: %d steps up to date, want 4 (apply, kubeconfig, Cilium, autoscaler):\n%s", n, errb.String())
		}
		if st, _ := helm.New(workload.Config).State(ctx, "cilium", "kube-system"); st.Revision != 1 {
			t.Errorf("re-create upgraded Cilium to revision %d", st.Revision)
		}
		md := get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers")
		if r, _, _ := unstructured.NestedInt64(md.Object, "spec", "replicas"); r != 3 {
			t.Errorf("replicas = %d after re-create, want the autoscaler's 3", r)
		}
		for _, mf := range md.GetManagedFields() {
			if mf.Manager == kube.FieldManager && strings.Contains(string(mf.FieldsV1.Raw), `"f:replicas"`) {
				t.Errorf("labctl owns spec.replicas of an autoscaled MachineDeployment: %s", mf.FieldsV1.Raw)
			}
		}
	})

	t.Run("worker memory change rolls to a new template", func(t *testing.T) {
		old := get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers")
		oldName, _, _ := unstructured.NestedString(old.Object, "spec", "template", "spec", "infrastructureRef", "name")
		lab.Clusters[0].Pools[0].Size.Memory = "4Gi"
		defer func() { lab.Clusters[0].Pools[0].Size.Memory = "2Gi" }()
		if err := cluster.Create(ctx, opts); err != nil {
			t.Fatalf("create with 4Gi workers: %v", err)
		}
		md := get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers")
		newName, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "infrastructureRef", "name")
		if newName == oldName || !strings.HasPrefix(newName, "lab1-worker-4g-") {
			t.Errorf("template %s → %s, want a new lab1-worker-4g-<hash>", oldName, newName)
		}
		pmt := get(t, mc, "infrastructure.cluster.x-k8s.io/v1alpha2", "ProxmoxMachineTemplate", "lab1", newName)
		if m, _, _ := unstructured.NestedInt64(pmt.Object, "spec", "template", "spec", "memoryMiB"); m != 4096 {
			t.Errorf("new template memory %d MiB", m)
		}
		if r, _, _ := unstructured.NestedInt64(md.Object, "spec", "replicas"); r != 3 {
			t.Errorf("replicas = %d after the roll, want the autoscaler's 3", r)
		}
	})

	t.Run("scale", func(t *testing.T) {
		so := cluster.ScaleOptions{Options: opts, Min: ptr.To(1), Max: ptr.To(7)}
		if err := cluster.Scale(ctx, so); err != nil {
			t.Fatal(err)
		}
		a := get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers").GetAnnotations()
		if a[clusterapi.AnnotationMinSize] != "1" || a[clusterapi.AnnotationMaxSize] != "7" {
			t.Errorf("bounds = %s-%s, want 1-7", a[clusterapi.AnnotationMinSize], a[clusterapi.AnnotationMaxSize])
		}
		err := cluster.Scale(ctx, cluster.ScaleOptions{Options: opts, Replicas: ptr.To(2)})
		if err == nil || !strings.Contains(err.Error(), "autoscaled") {
			t.Errorf("--replicas on an autoscaled pool: %v", err)
		}
	})

	t.Run("scale refuses", func(t *testing.T) {
		md := func() *unstructured.Unstructured {
			return get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers")
		}
		before := md().GetResourceVersion()
		for _, tc := range []struct {
			what string
			o    cluster.ScaleOptions
			want string
		}{
			{"no numbers", cluster.ScaleOptions{Options: opts}, "give --min and --max (an autoscaled pool) or --replicas (a fixed pool)"},
			{"bounds and a count", cluster.ScaleOptions{Options: opts, Min: ptr.To(1), Replicas: ptr.To(2)}, "pass one kind"},
			{"min above the pool's max", cluster.ScaleOptions{Options: opts, Min: ptr.To(8)}, "--max 7: must be >= --min (8), got 7"},
			{"max below the pool's min", cluster.ScaleOptions{Options: opts, Max: ptr.To(0)}, "--max 0: must be at least 1 so the autoscaler can add a worker"},
			{"no such pool", cluster.ScaleOptions{Options: opts, Min: ptr.To(1), Max: ptr.To(2), Pool: "gpu"}, "cluster lab1 has no MachineDeployment lab1/lab1-gpu for pool gpu"},
		} {
			err := cluster.Scale(ctx, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("scale with %s: %v, want an error saying %q", tc.what, err, tc.want)
			}
		}
		if after := md().GetResourceVersion(); after != before {
			t.Errorf("a refused scale wrote the MachineDeployment (resourceVersion %s → %s)", before, after)
		}
	})

	t.Run("list and kubeconfig", func(t *testing.T) {
		// The bounds list shows are the MachineDeployment's, whichever
		// subtests ran before this one (scale sets 1-7, create 0-5).
		a := get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers").GetAnnotations()
		wantMax, err := strconv.Atoi(a[clusterapi.AnnotationMaxSize])
		if err != nil {
			t.Fatalf("the MachineDeployment has no max-size annotation: %v", a)
		}
		list, err := cluster.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Name != "lab1" || list[0].Phase != "Provisioned" || list[0].ControlPlane != "initialized" ||
			list[0].MaxWorkers == nil || *list[0].MaxWorkers != wantMax {
			t.Errorf("list = %+v, want lab1 Provisioned, initialized, max %d", list, wantMax)
		}
		kc, err := cluster.Kubeconfig(ctx, opts)
		if err != nil || !bytes.Equal(kc, wkc) {
			t.Errorf("kubeconfig: %v", err)
		}
	})

	t.Run("describe", func(t *testing.T) {
		// The bounds are the MachineDeployment's, whichever subtests ran
		// before this one (scale sets 1-7, create 0-5).
		ann := get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers").GetAnnotations()
		bounds := ann[clusterapi.AnnotationMinSize] + "-" + ann[clusterapi.AnnotationMaxSize]
		// Stand-in CAPI and deployment controller status: one control-plane
		// machine with its node, one worker running, one provisioning.
		cl := get(t, mc, "cluster.x-k8s.io/v1beta2", "Cluster", "lab1", "lab1")
		kcpName, _, _ := unstructured.NestedString(cl.Object, "spec", "controlPlaneRef", "name")
		// CAPI copies the endpoint from the ProxmoxCluster into the Cluster.
		_ = unstructured.SetNestedMap(cl.Object, map[string]any{"host": lab.Clusters[0].ControlPlane.Endpoint, "port": int64(6443)}, "spec", "controlPlaneEndpoint")
		if err := mc.Update(ctx, cl, client.FieldOwner("stand-in-capi")); err != nil {
			t.Fatal(err)
		}
		setStatus(t, mc, cl, map[string]any{"phase": "Provisioned", "initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true},
			"conditions": []any{cond("Available", "False", "NotAvailable", "* WorkersAvailable: 1 of 2 workers ready")}})
		setStatus(t, mc, get(t, mc, "controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "lab1", kcpName),
			map[string]any{"replicas": int64(1), "readyReplicas": int64(1), "upToDateReplicas": int64(1), "version": "v1.35.4",
				"initialization": map[string]any{"controlPlaneInitialized": true}, "conditions": []any{cond("Available", "True", "Available", "")}})
		setStatus(t, mc, get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers"),
			map[string]any{"replicas": int64(2), "readyReplicas": int64(1)})
		setStatus(t, mc, get(t, mc, "apps/v1", "Deployment", "lab1", "cluster-autoscaler"),
			map[string]any{"replicas": int64(1), "readyReplicas": int64(1), "conditions": []any{map[string]any{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."}}})
		// A CAPI install labels its CRDs and every provider's with the
		// contract versions they serve; clusterctl's discovery follows
		// references through those labels. The pinned CRDs are the bare
		// generated files, so the stand-in labels them as the release
		// manifests do.
		for crd, v := range map[string]string{"kubeadmcontrolplanes.controlplane.cluster.x-k8s.io": "v1beta2",
			"kubeadmconfigs.bootstrap.cluster.x-k8s.io": "v1beta2", "proxmoxclusters.infrastructure.cluster.x-k8s.io": "v1alpha2",
			"proxmoxmachines.infrastructure.cluster.x-k8s.io": "v1alpha2"} {
			contract := "cluster.x-k8s.io/v1beta2"
			if v == "v1alpha2" {
				contract = "cluster.x-k8s.io/v1beta1" // CAPMOX v0.9.0 implements the v1beta1 contract
			}
			o := get(t, mc, "apiextensions.k8s.io/v1", "CustomResourceDefinition", "", crd)
			l := o.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l[contract] = v
			o.SetLabels(l)
			if err := mc.Update(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		kcp := get(t, mc, "controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "lab1", kcpName)
		md := get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers")
		ms := newMachineSet(t, mc, md)
		newMachine(t, mc, "lab1-control-plane-abcde", map[string]string{"cluster.x-k8s.io/control-plane": ""}, kcp, "Running", "lab1-control-plane-abcde",
			cond("Ready", "True", "Ready", ""))
		newMachine(t, mc, "lab1-workers-x1", map[string]string{"cluster.x-k8s.io/deployment-name": "lab1-workers"}, ms, "Running", "lab1-workers-x1",
			cond("Ready", "True", "Ready", ""))
		newMachine(t, mc, "lab1-workers-x2", map[string]string{"cluster.x-k8s.io/deployment-name": "lab1-workers"}, ms, "Provisioning", "",
			cond("Ready", "False", "NotReady", "* InfrastructureReady: ProxmoxMachine is cloning the template\n* NodeHealthy: Waiting for a Node"))
		// CAPMOX v0.9.0 (contract v1beta1) made the ProxmoxMachine of x2
		// from the MachineDeployment's template; its conditions are
		// v1beta1 conditions, with a severity.
		tmplName, _, _ := unstructured.NestedString(md.Object, "spec", "template", "spec", "infrastructureRef", "name")
		tmpl := get(t, mc, "infrastructure.cluster.x-k8s.io/v1alpha2", "ProxmoxMachineTemplate", "lab1", tmplName)
		pm := &unstructured.Unstructured{}
		pm.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1alpha2")
		pm.SetKind("ProxmoxMachine")
		pm.SetNamespace("lab1")
		pm.SetName("lab1-workers-x2")
		pm.Object["spec"], _, _ = unstructured.NestedMap(tmpl.Object, "spec", "template", "spec")
		if err := mc.Create(ctx, pm); err != nil {
			t.Fatalf("stand-in ProxmoxMachine: %v", err)
		}
		notReady := cond("Ready", "False", "CloningTemplate", "cloning template 100")
		notReady["severity"] = "Info"
		setStatus(t, mc, pm, map[string]any{"conditions": []any{notReady}})

		d, err := cluster.Describe(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if d.Phase != "Provisioned" || d.Endpoint != lab.Clusters[0].ControlPlane.Endpoint+":6443" {
			t.Errorf("cluster = %s %s", d.Phase, d.Endpoint)
		}
		root := d.Tree
		if root == nil || root.Kind != "Cluster" || root.Name != "lab1" || root.Ready != "False" || root.Condition != "Available" || root.Reason != "NotAvailable" {
			t.Fatalf("root = %+v", root)
		}
		if n := root.Find("ProxmoxCluster", "lab1"); n == nil || n.Role != "ClusterInfrastructure" {
			t.Errorf("cluster infrastructure = %+v", n)
		}
		cp := root.Find("KubeadmControlPlane", kcpName)
		if cp == nil || cp.Role != "ControlPlane" || cp.Ready != "True" || cp.Details != "1/1 ready, 1 up to date, v1.35.4" {
			t.Fatalf("control plane = %+v", cp)
		}
		if len(cp.Children) != 1 || cp.Children[0].Kind != "Machine" || cp.Children[0].Name != "lab1-control-plane-abcde" || cp.Children[0].Ready != "True" {
			t.Errorf("control plane machines = %+v", cp.Children)
		}
		workers := root.Find("Workers", "")
		if workers == nil || len(workers.Children) != 1 {
			t.Fatalf("workers = %+v", workers)
		}
		mdn := workers.Children[0]
		if mdn.Kind != "MachineDeployment" || mdn.Name != "lab1-workers" || mdn.Details != "1/2 ready, desired 3, autoscaled "+bounds {
			t.Errorf("machine deployment = %+v", mdn)
		}
		var got []string
		for _, m := range mdn.Children {
			got = append(got, m.Name+" "+m.Ready+" "+m.Reason+" "+m.Details)
		}
		want := []string{"lab1-workers-x1 True Ready Running, node lab1-workers-x1, v1.35.4", "lab1-workers-x2 False NotReady Provisioning, no node yet, v1.35.4"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("worker machines = %q\nwant %q", got, want)
		}
		if a := root.Find("Deployment", "cluster-autoscaler"); a == nil || a.Role != "Autoscaler" || a.Ready != "True" || !strings.Contains(a.Details, "1/1 ready, registry.k8s.io/autoscaling/cluster-autoscaler:") {
			t.Errorf("autoscaler = %+v", a)
		}
		var text bytes.Buffer
		if err := cluster.DescribeText(opts.IO, &text, d); err != nil {
			t.Fatal(err)
		}
		t.Logf("describe:\n%s", text.String())
		for _, want := range []string{"Cluster lab1/lab1  Provisioned  endpoint " + lab.Clusters[0].ControlPlane.Endpoint + ":6443\n\nNAME ",
			"\n├─ControlPlane - KubeadmControlPlane/" + kcpName + " ", "\n│   └─Machine/lab1-workers-x2 "} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("describe text lacks %q", want)
			}
		}
		// The rows as a user reads them, an hour after the stand-in
		// conditions changed.
		now, _ := time.Parse(time.RFC3339, "2026-01-01T01:00:00Z")
		wantRows := [][]string{
			{"Cluster/lab1", "False", "NotAvailable", "60m", "Provisioned", "* WorkersAvailable: 1 of 2 workers ready"},
			{"├─ClusterInfrastructure - ProxmoxCluster/lab1", "", "", "", "", ""},
			{"├─ControlPlane - KubeadmControlPlane/" + kcpName, "True", "Available", "60m", "1/1 ready, 1 up to date, v1.35.4", ""},
			{"│ └─Machine/lab1-control-plane-abcde", "True", "Ready", "60m", "Running, node lab1-control-plane-abcde, v1.35.4", ""},
			{"├─Workers", "", "", "", "", ""},
			{"│ └─MachineDeployment/lab1-workers", "", "", "", "1/2 ready, desired 3, autoscaled " + bounds, ""},
			{"│   ├─Machine/lab1-workers-x1", "True", "Ready", "60m", "Running, node lab1-workers-x1, v1.35.4", ""},
			{"│   └─Machine/lab1-workers-x2", "False", "NotReady", "60m", "Provisioning, no node yet, v1.35.4", "* InfrastructureReady: ProxmoxMachine is cloning the template"},
			{"│     │", "", "", "", "", "* NodeHealthy: Waiting for a Node"},
			{"│     └─MachineInfrastructure - ProxmoxMachine/lab1-workers-x2", "False", "CloningTemplate", "60m", "", "cloning template 100"},
			{"└─Autoscaler - Deployment/cluster-autoscaler", "True", "MinimumReplicasAvailable", "", "1/1 ready, " + d.Tree.Find("Deployment", "cluster-autoscaler").Details[len("1/1 ready, "):], "Deployment has minimum availability."},
		}
		if rows := cluster.DescribeRows(d, now); !reflect.DeepEqual(rows, wantRows) {
			t.Errorf("describe rows:\n%q\nwant\n%q", rows, wantRows)
		}
		js, _ := json.Marshal(d)
		for _, want := range []string{`"tree":{"kind":"Cluster","name":"lab1","ready":"False","condition":"Available","reason":"NotAvailable"`,
			`{"kind":"Workers","name":"","children":[{"kind":"MachineDeployment","name":"lab1-workers","details":"1/2 ready, desired 3, autoscaled ` + bounds + `"`} {
			if !strings.Contains(string(js), want) {
				t.Errorf("describe json lacks %s:\n%s", want, js)
			}
		}
		assertNoSecret(t, wkc, text.String()+string(js))
	})

	t.Run("dry runs change nothing", func(t *testing.T) {
		r, _ := cluster.Render(lab, "lab1", nil)
		objs := append(append([]*unstructured.Unstructured{}, r.Objects...), r.Autoscaler...)
		before := rvs(t, mc, objs)
		dry := opts
		dry.DryRun = true
		lab.Clusters[0].Pools[0].Size.Memory = "8Gi"
		errb.Reset()
		err := cluster.Create(ctx, dry)
		lab.Clusters[0].Pools[0].Size.Memory = "2Gi"
		if err != nil {
			t.Fatalf("create --dry-run: %v\n%s", err, errb.String())
		}
		// The plan names exactly the steps a real run takes, in order:
		// the waits too, which a dry run only says it would run.
		if got := ui.Started(errb.String()); !slices.Equal(got, realSteps) {
			t.Errorf("create --dry-run lists steps\n  %s\nbut create ran\n  %s", strings.Join(got, "\n  "), strings.Join(realSteps, "\n  "))
		}
		for _, want := range []string{"would: create ProxmoxMachineTemplate lab1/lab1-worker-8g-", "would: update MachineDeployment lab1/lab1-workers",
			"wait for control plane initialized (would run)"} {
			if !strings.Contains(errb.String(), want) {
				t.Errorf("create --dry-run output lacks %q:\n%s", want, errb.String())
			}
		}
		if err := cluster.Scale(ctx, cluster.ScaleOptions{Options: dry, Min: ptr.To(2), Max: ptr.To(9)}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(errb.String(), "would: set worker bounds of MachineDeployment lab1/lab1-workers to min 2, max 9 (were 1, 7)") {
			t.Errorf("scale --dry-run output:\n%s", errb.String())
		}
		// No --yes and no answer: a dry run must not ask, and deletes nothing.
		if err := cluster.Delete(ctx, cluster.DeleteOptions{Options: dry}); err != nil {
			t.Fatalf("delete --dry-run: %v", err)
		}
		if !strings.Contains(errb.String(), "would: delete Cluster lab1/lab1") {
			t.Errorf("delete --dry-run output:\n%s", errb.String())
		}
		if after := rvs(t, mc, objs); !mapsEqual(before, after) {
			t.Errorf("a dry run changed objects:\nbefore %v\nafter  %v", before, after)
		}
		assertNoSecret(t, wkc, out.String()+errb.String())
	})

	t.Run("scale to min = max is lab.yaml's fixed pool", func(t *testing.T) {
		md := func() *unstructured.Unstructured {
			return get(t, mc, "cluster.x-k8s.io/v1beta2", "MachineDeployment", "lab1", "lab1-workers")
		}
		if err := cluster.Scale(ctx, cluster.ScaleOptions{Options: opts, Min: ptr.To(3), Max: ptr.To(3)}); err != nil {
			t.Fatal(err)
		}
		// What the same numbers in lab.yaml render.
		fixed := *lab
		fixed.Clusters = slices.Clone(lab.Clusters)
		fixed.Clusters[0].Pools = slices.Clone(lab.Clusters[0].Pools)
		fixed.Clusters[0].Pools[0].Min, fixed.Clusters[0].Pools[0].Max = 3, 3
		r, err := cluster.Render(&fixed, "lab1", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := r.Find("MachineDeployment", "lab1-workers")
		wantReplicas, _, _ := unstructured.NestedInt64(want.Object, "spec", "replicas")
		got := md()
		gotReplicas, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas")
		if gotReplicas != 3 || gotReplicas != wantReplicas {
			t.Errorf("replicas = %d after scale --min 3 --max 3, want lab.yaml's 3/3: %d", gotReplicas, wantReplicas)
		}
		// lab.yaml's 3/3 has no autoscaler annotation; neither may the
		// scaled pool keep one (labctl's apply-hash is create's).
		for _, md := range []*unstructured.Unstructured{want, got} {
			for k := range md.GetAnnotations() {
				if k == clusterapi.AnnotationMinSize || k == clusterapi.AnnotationMaxSize || strings.HasPrefix(k, clusterapi.CapacityPrefix) {
					t.Errorf("MachineDeployment of a fixed pool of 3 has the autoscaler annotation %s (rendered: %v, after scale: %v)", k, want.GetAnnotations(), got.GetAnnotations())
				}
			}
		}
		// Now a fixed pool: bounds are refused, a count is taken.
		if err := cluster.Scale(ctx, cluster.ScaleOptions{Options: opts, Min: ptr.To(1), Max: ptr.To(4)}); err == nil || !strings.Contains(err.Error(), "fixed pool") {
			t.Errorf("--min/--max on the pool made fixed: %v", err)
		}
		if err := cluster.Scale(ctx, cluster.ScaleOptions{Options: opts, Replicas: ptr.To(2)}); err != nil {
			t.Fatal(err)
		}
		if r, _, _ := unstructured.NestedInt64(md().Object, "spec", "replicas"); r != 2 {
			t.Errorf("replicas = %d after scale --replicas 2", r)
		}
	})

	t.Run("delete waits for the machines", func(t *testing.T) {
		// Stand-in machines, and a stand-in CAPI that removes them once the
		// Cluster is being deleted.
		for _, n := range []string{"lab1-workers-a", "lab1-workers-b"} {
			m := &unstructured.Unstructured{}
			m.SetGroupVersionKind(clusterapi.MachineGVK)
			m.SetNamespace("lab1")
			m.SetName(n)
			m.SetLabels(map[string]string{clusterapi.ClusterNameLabel: "lab1"})
			_ = unstructured.SetNestedField(m.Object, "lab1", "spec", "clusterName")
			_ = unstructured.SetNestedMap(m.Object, map[string]any{"configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": n}}, "spec", "bootstrap")
			_ = unstructured.SetNestedMap(m.Object, map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ProxmoxMachine", "name": n}, "spec", "infrastructureRef")
			if err := mc.Create(ctx, m); err != nil {
				t.Fatalf("stand-in machine: %v", err)
			}
		}
		go func() {
			for ctx.Err() == nil {
				cl := &unstructured.Unstructured{}
				cl.SetGroupVersionKind(clusterapi.ClusterGVK)
				if err := mc.Get(ctx, client.ObjectKey{Namespace: "lab1", Name: "lab1"}, cl); err != nil {
					time.Sleep(300 * time.Millisecond) // let labctl see the machines first
					m := &unstructured.Unstructured{}
					m.SetGroupVersionKind(clusterapi.MachineGVK)
					_ = mc.DeleteAllOf(ctx, m, client.InNamespace("lab1"))
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		// Without --yes it asks; an empty answer deletes nothing.
		if err := cluster.Delete(ctx, cluster.DeleteOptions{Options: opts}); err != cluster.ErrAborted {
			t.Fatalf("delete without --yes and no answer: %v, want aborted", err)
		}
		errb.Reset()
		if err := cluster.Delete(ctx, cluster.DeleteOptions{Options: opts, Yes: true}); err != nil {
			t.Fatalf("delete: %v\n%s", err, errb.String())
		}
		if !strings.Contains(errb.String(), "wait for the machines to go") {
			t.Errorf("delete output:\n%s", errb.String())
		}
		list, _ := cluster.List(ctx, opts)
		if len(list) != 0 {
			t.Errorf("clusters left: %+v", list)
		}
	})
}

func toStrings(v any) []string {
	in, _ := v.([]any)
	out := make([]string, len(in))
	for i, x := range in {
		out[i], _ = x.(string)
	}
	return out
}

func rvs(t *testing.T, c client.Client, objs []*unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetName()] = get(t, c, o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName()).GetResourceVersion()
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// assertNoSecret fails when any line of the kubeconfig's credentials shows
// up in output.
func assertNoSecret(t *testing.T, kubeconfig []byte, output string) {
	t.Helper()
	for _, line := range strings.Split(string(kubeconfig), "\n") {
		if _, v, ok := strings.Cut(line, "-data: "); ok && len(v) > 20 && strings.Contains(output, v[:20]) {
			t.Errorf("output leaks kubeconfig credentials (%s...)", v[:20])
		}
	}
}

func mustJSONRoundTrip(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func cond(typ, status, reason, msg string) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "lastTransitionTime": "2026-01-01T00:00:00Z"}
}

// setStatus writes obj's status as the stand-in controllers would.
func setStatus(t *testing.T, c client.Client, obj *unstructured.Unstructured, status map[string]any) {
	t.Helper()
	obj.Object["status"] = status
	if err := c.Status().Update(context.Background(), obj); err != nil {
		t.Fatalf("stand-in status of %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

// newMachine creates a stand-in Machine of lab1 with phase, node and
// conditions, controlled by owner as CAPI's controllers create it.
func newMachine(t *testing.T, c client.Client, name string, labels map[string]string, owner *unstructured.Unstructured, phase, node string, conds ...any) {
	t.Helper()
	m := &unstructured.Unstructured{}
	m.SetGroupVersionKind(clusterapi.MachineGVK)
	m.SetNamespace("lab1")
	m.SetName(name)
	labels[clusterapi.ClusterNameLabel] = "lab1"
	m.SetLabels(labels)
	m.SetOwnerReferences([]metav1.OwnerReference{controllerRef(owner)})
	_ = unstructured.SetNestedField(m.Object, "lab1", "spec", "clusterName")
	_ = unstructured.SetNestedField(m.Object, "v1.35.4", "spec", "version")
	_ = unstructured.SetNestedMap(m.Object, map[string]any{"configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}}, "spec", "bootstrap")
	_ = unstructured.SetNestedMap(m.Object, map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ProxmoxMachine", "name": name}, "spec", "infrastructureRef")
	if err := c.Create(context.Background(), m); err != nil {
		t.Fatalf("stand-in machine: %v", err)
	}
	st := map[string]any{"phase": phase, "conditions": conds}
	if node != "" {
		st["nodeRef"] = map[string]any{"name": node}
	}
	setStatus(t, c, m, st)
}

func controllerRef(owner *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: owner.GetAPIVersion(), Kind: owner.GetKind(), Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// newMachineSet creates the stand-in MachineSet CAPI's MachineDeployment
// controller makes for md.
func newMachineSet(t *testing.T, c client.Client, md *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	ms := &unstructured.Unstructured{}
	ms.SetAPIVersion("cluster.x-k8s.io/v1beta2")
	ms.SetKind("MachineSet")
	ms.SetNamespace("lab1")
	ms.SetName(md.GetName() + "-abc12")
	ms.SetLabels(map[string]string{clusterapi.ClusterNameLabel: "lab1", "cluster.x-k8s.io/deployment-name": md.GetName()})
	ms.SetOwnerReferences([]metav1.OwnerReference{controllerRef(md)})
	spec, _, _ := unstructured.NestedMap(md.Object, "spec")
	ms.Object["spec"] = map[string]any{"clusterName": spec["clusterName"], "replicas": int64(2), "selector": spec["selector"], "template": spec["template"]}
	if err := c.Create(context.Background(), ms); err != nil {
		t.Fatalf("stand-in machine set: %v", err)
	}
	return ms
}

// TestCreateChecksPrerequisitesBeforeWriting: on a management cluster
// without Cluster API, or without the autoscaler's ClusterRole that 'mgmt
// install' makes, create fails naming what is missing and the fix, and
// writes nothing: no Namespace lab1 is left behind.
func TestCreateChecksPrerequisitesBeforeWriting(t *testing.T) {
	lab, _, err := config.Load(context.Background(), config.Request{Path: "../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	lab.Management.SSHPublicKeyFile, lab.Management.SSHPublicKeys = "", []string{ownerKey}
	for _, tc := range []struct {
		name string
		crds []string
		want []string
	}{
		{"Cluster API", nil, []string{"does not serve", "Cluster (cluster.x-k8s.io/v1beta2)", "ProxmoxCluster (infrastructure.cluster.x-k8s.io/v1alpha2)", "KubeadmControlPlane"}},
		{"the autoscaler ClusterRole", []string{"capi", "capmox", "ipam"}, []string{"ClusterRole " + clusterapi.SharedClusterRole + " is missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testbed.Start(t, testbed.WithCRDs(tc.crds...))
			mgmt, err := kube.Connect(env.Kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			for _, dry := range []bool{true, false} {
				io, _, errb, _ := ui.Test()
				io.Err = errb
				err = cluster.Create(t.Context(), cluster.Options{IO: io, Lab: lab, Name: "lab1", Mgmt: mgmt,
					KubeconfigDir: t.TempDir(), Timeout: 10 * time.Second, DryRun: dry})
				if err == nil {
					t.Fatalf("create (dry run %v) on a management cluster lacking %s succeeded\n%s", dry, tc.name, errb.String())
				}
				for _, w := range append(tc.want, "labctl mgmt install", "nothing was written") {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("create (dry run %v): error lacks %q: %v", dry, w, err)
					}
				}
			}
			var ns corev1.Namespace
			if err := newClient(t, env).Get(t.Context(), client.ObjectKey{Name: "lab1"}, &ns); err == nil {
				t.Errorf("create left Namespace lab1 behind")
			}
		})
	}
}

// One reader of the public keys: 'cluster create' used to put any line of
// sshPublicKeyFile on the nodes, a mistyped path's content included.
func TestRenderRefusesALineThatIsNoPublicKey(t *testing.T) {
	lab, _, err := config.Load(context.Background(), config.Request{Path: "../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "id.pub")
	if err := os.WriteFile(f, []byte("# mine\n"+ownerKey+"\nnot a key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lab.Management.SSHPublicKeys, lab.Management.SSHPublicKeyFile = nil, f
	_, err = cluster.Render(lab, "lab1", nil)
	if err == nil || !strings.Contains(err.Error(), "management.sshPublicKeyFile: "+f+" line 3 is not an SSH public key") {
		t.Fatalf("Render = %v; want line 3 refused, naming the field and file", err)
	}
}
