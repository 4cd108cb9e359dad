package box_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/labctl/labctl/internal/clusterapi"
	"github.com/labctl/labctl/internal/config"
	"github.com/labctl/labctl/internal/kube"
	"github.com/labctl/labctl/internal/testing/testbed/box"
	"github.com/labctl/labctl/internal/versions"
)

const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkJ2tN8s0jv4m1Yl0QhRr5o5m3u0T0q9b8mWc3xYk2F owner@laptop"

func renderLab1(t *testing.T) *clusterapi.Rendered {
	t.Helper()
	lab, _, err := config.Load(context.Background(), config.Request{Path: "../../../../examples/lab.yaml", Explicit: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := clusterapi.Render(clusterapi.Input{Lab: lab, Cluster: "lab1", Credentials: ownerKeys{}, Pins: versions.MustGet()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The objects of `labctl cluster create lab1`, applied by labctl's own
// apply to the box, pass the real webhooks of every provider labctl
// installs (Cluster API core, kubeadm bootstrap and control plane, CAPMOX,
// in-cluster IPAM), and the real
// defaulting webhook does what labctl relies on: it sets the autoscaled
// MachineDeployment's replicas from the autoscaler's min-size annotation,
// which labctl leaves unset. A refused object reaches labctl's caller with
// the webhook's own message.
func TestRealCAPIWebhooks(t *testing.T) {
	b := box.Start(t, box.WithProviders("cluster-api", "kubeadm-bootstrap", "kubeadm-control-plane", "capmox", "ipam-in-cluster"))
	kc := kube.NewForConfig(b.Env.Config, b.Env.Kubeconfig)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	r := renderLab1(t)
	if !r.Pools[0].Autoscaled {
		t.Fatal("examples/lab.yaml's lab1 is not autoscaled; the replicas check below proves nothing")
	}
	md := r.Find("MachineDeployment", r.Pools[0].MachineDeployment)
	if _, set, _ := unstructured.NestedFieldNoCopy(md.Object, "spec", "replicas"); set {
		t.Fatal("labctl rendered spec.replicas on an autoscaled MachineDeployment; the webhook's defaulting is not what sets it")
	}
	min := md.GetAnnotations()[clusterapi.AnnotationMinSize]

	t.Run("lab1 is accepted", func(t *testing.T) {
		if _, err := kc.Apply(ctx, r.Objects, kube.ApplyOptions{}); err != nil {
			t.Fatalf("applying lab1's objects: %v", err)
		}
		got, found, err := kc.Get(ctx, kube.RefOf(md))
		if err != nil || !found {
			t.Fatalf("MachineDeployment %s after apply: found=%v err=%v", md.GetName(), found, err)
		}
		replicas, set, _ := unstructured.NestedInt64(got.Object, "spec", "replicas")
		if !set || itoa(replicas) != min {
			t.Errorf("MachineDeployment %s spec.replicas = %d (set %v), want the min-size annotation %s set by CAPI's defaulting webhook", md.GetName(), replicas, set, min)
		}
		// The real Cluster controller takes lab1 up: it finds the
		// ProxmoxCluster's contract through the rendered CRD's labels, and
		// then waits for the infrastructure and control plane no provider
		// runs here yet.
		cluster := r.Find("Cluster", "")
		var phase string
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			got, found, err := kc.Get(ctx, kube.RefOf(cluster))
			if err != nil || !found {
				t.Fatalf("Cluster %s: found=%v err=%v", cluster.GetName(), found, err)
			}
			phase, _, _ = unstructured.NestedString(got.Object, "status", "phase")
			if phase == "Provisioning" {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if phase != "Provisioning" {
			t.Errorf("Cluster %s status.phase = %q after 90 s, want Provisioning from the real Cluster controller", cluster.GetName(), phase)
		}
		for name, p := range b.Procs {
			if exited, err := p.Exited(); exited {
				t.Errorf("%s exited after lab1 was applied: %v", name, err)
			}
		}
	})

	t.Run("a refusal carries the webhook's message", func(t *testing.T) {
		bad := md.DeepCopy()
		if err := unstructured.SetNestedField(bad.Object, "v1.35", "spec", "template", "spec", "version"); err != nil {
			t.Fatal(err)
		}
		wantRefusal(ctx, t, kc, r.Objects[0], bad, "a MachineDeployment with version v1.35",
			`admission webhook "validation.machinedeployment.cluster.x-k8s.io" denied the request`,
			`spec.template.spec.version: Invalid value: "v1.35": must be a valid semantic version`)
	})

	// CAPMOX's own validating webhook refuses a control-plane VIP inside
	// the node IP range (internal/webhook/proxmoxcluster_webhook.go,
	// validateControlPlaneEndpoint, v0.9.0), on create and on update.
	t.Run("a CAPMOX refusal carries the webhook's message", func(t *testing.T) {
		pc := r.Find("ProxmoxCluster", "")
		bad := pc.DeepCopy()
		// Inside examples/lab.yaml's nodeIPRange 192.168.4.40-59: an
		// object's field, never dialled.
		if err := unstructured.SetNestedField(bad.Object, "192.168.4.45", "spec", "controlPlaneEndpoint", "host"); err != nil {
			t.Fatal(err)
		}
		wantRefusal(ctx, t, kc, r.Objects[0], bad, "a ProxmoxCluster whose VIP 192.168.4.45 is inside its node IP range",
			`admission webhook "validation.proxmoxcluster.infrastructure.cluster.x-k8s.io" denied the request`,
			`spec.IPv4Config.addresses: Invalid value: ["192.168.4.40-192.168.4.59"]: addresses may not contain the endpoint IP`)
	})
}

// wantRefusal applies bad (with its namespace, so a subtest also runs
// alone) through labctl's apply and wants an error carrying each of want.
func wantRefusal(ctx context.Context, t *testing.T, kc *kube.Client, ns, bad *unstructured.Unstructured, what string, want ...string) {
	t.Helper()
	_, err := kc.Apply(ctx, []*unstructured.Unstructured{ns, bad}, kube.ApplyOptions{})
	if err == nil {
		t.Fatalf("the box accepted %s", what)
	}
	msg := err.Error()
	t.Logf("labctl reports: %s", msg)
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error does not carry %q:\n%s", w, msg)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// ownerKeys is the render's credentials reader in the box: the owner's
// key. The clusters it renders this way are on Proxmox, with no libvirt
// host whose files it would read.
type ownerKeys struct{}

func (ownerKeys) SSHKeys() ([]string, error) { return []string{sshKey}, nil }

func (ownerKeys) Host(h *config.Hypervisor) (map[string][]byte, error) {
	return nil, fmt.Errorf("the box reads no libvirt host's files (%s)", h.Name)
}
