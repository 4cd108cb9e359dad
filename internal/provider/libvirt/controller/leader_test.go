package controller_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/labctl/labctl/internal/provider/libvirt/controller"
	"github.com/labctl/labctl/internal/testing/testbed"
)

// With --leader-elect, two replicas share one Lease: one holds it and
// reconciles; both answer /healthz, and /readyz once their cache is
// filled. Cancelled, the holder gives the lease up and the other takes it.
func TestLeaderElection(t *testing.T) {
	env := testbed.Start(t, testbed.WithCRDs("capi", "ipam"))
	s, err := controller.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	// As the provider's ServiceAccount: its role must cover the Lease.
	kubeconfig := installComponents(t, c, env.Kubeconfig)

	start := func(addr string) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- controller.Run(ctx, controller.Options{
				Kubeconfig: kubeconfig, HealthAddr: addr, LeaderElect: true, LeaderElectionNamespace: "default",
				Log: io.Discard,
			})
		}()
		return cancel, done
	}
	addrA, addrB := "127.0.0.1:"+closedPort(t), "127.0.0.1:"+closedPort(t)
	stopA, doneA := start(addrA)
	eventually(t, "replica A ready and holding the lease", 60*time.Second, func() (bool, string) {
		if code := get(addrA + "/readyz"); code != http.StatusOK {
			return false, http.StatusText(code)
		}
		return holder(t, c) != "", "no holder"
	})
	first := holder(t, c)
	stopB, doneB := start(addrB)
	defer func() { stopB(); <-doneB }()
	eventually(t, "replica B answers its probes", 60*time.Second, func() (bool, string) {
		return get(addrB+"/healthz") == http.StatusOK && get(addrB+"/readyz") == http.StatusOK, "not yet"
	})
	if h := holder(t, c); h != first {
		t.Fatalf("the lease moved from %q to %q while A runs", first, h)
	}
	stopA()
	if err := <-doneA; err != nil {
		t.Errorf("replica A ended with %v", err)
	}
	eventually(t, "replica B takes the lease", 60*time.Second, func() (bool, string) {
		h := holder(t, c)
		return h != "" && h != first, h
	})
}

func get(url string) int {
	resp, err := http.Get("http://" + url)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func holder(t *testing.T, c client.Client) string {
	t.Helper()
	var l coordinationv1.Lease
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "libvirt-provider.infrastructure.labctl.dev"}, &l); err != nil {
		return ""
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
