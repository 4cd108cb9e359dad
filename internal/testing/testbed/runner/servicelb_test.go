package runner

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/labctl/labctl/internal/testing/testbed"
)

// The ServiceLB stand-in, as k3s's: a LoadBalancer Service backed by a
// ready process answers on the node's address at the Service's port and
// says so in its status; without a ready process its status names no
// address; a ClusterIP Service and one with a loadBalancerClass (another
// load balancer's) are left alone; a Service gone closes its port.
func TestServiceLBPublishesOnTheNodeAddress(t *testing.T) {
	ctx := context.Background()
	const node = "127.77.0.21"
	port, release, err := testbed.ReservePort()
	if err != nil {
		t.Fatal(err)
	}
	release()
	// The process: an echo server on a loopback port of its own.
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("echo " + line))
			}()
		}
	}()
	local := backend.Addr().(*net.TCPAddr).Port
	p := &Proc{Ports: map[int32]int{6443: local}, ready: true}
	p.Pod = []*Proc{p}

	svc := func(name string, typ corev1.ServiceType) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant1", Name: name},
			Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Name: "kube-apiserver", Port: int32(port), TargetPort: intstr.FromInt32(6443)}}}}
	}
	lb, cip, other := svc("tenant1", corev1.ServiceTypeLoadBalancer), svc("plain", corev1.ServiceTypeClusterIP), svc("metallb", corev1.ServiceTypeLoadBalancer)
	class := "metallb"
	other.Spec.LoadBalancerClass = &class
	cs := fake.NewClientset(lb, cip, other)
	r := &Runner{t: t, cs: cs, dir: t.TempDir()}
	r.ServeLoadBalancers(node)
	defer r.dropForwards(nil)

	get := func(name string) *corev1.Service {
		s, err := cs.CoreV1().Services("tenant1").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ingress := func(name string) []corev1.LoadBalancerIngress { return get(name).Status.LoadBalancer.Ingress }

	// Not ready yet: the port is taken, the status names no address.
	p.ready = false
	if keys := r.loadBalance(ctx, get("tenant1"), p); len(keys) != 1 {
		t.Fatalf("forwards kept: %v, want the Service's one port", keys)
	}
	if in := ingress("tenant1"); len(in) != 0 {
		t.Errorf("ingress %v before the process is ready, want none", in)
	}
	p.ready = true
	r.loadBalance(ctx, get("tenant1"), p)
	if in := ingress("tenant1"); len(in) != 1 || in[0].IP != node {
		t.Errorf("ingress %v, want %s", in, node)
	}
	addr := net.JoinHostPort(node, strconv.Itoa(port))
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dialing the Service on the node's address %s: %v", addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if got != "echo hello\n" {
		t.Errorf("through %s the process answered %q, want %q", addr, got, "echo hello\n")
	}

	for _, name := range []string{"plain", "metallb"} {
		if keys := r.loadBalance(ctx, get(name), p); len(keys) != 0 || len(ingress(name)) != 0 {
			t.Errorf("Service %s: forwards %v, ingress %v; ServiceLB leaves it alone", name, keys, ingress(name))
		}
	}

	// The Service gone: its port is closed.
	r.dropForwards(map[string]bool{})
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still answers after the Service went", addr)
	}
}
