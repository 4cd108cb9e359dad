package runner

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServeLoadBalancers makes the runner stand in for k3s's ServiceLB on a
// one-node management cluster whose node has the address addr (a
// loopback address standing for the management VM's): each LoadBalancer
// Service whose process runs here (a Kamaji tenant's control plane,
// which labctl publishes so) answers on addr at each of its ports, and
// its status.loadBalancer.ingress names addr.
//
// What it copies, from k3s pkg/cloudprovider/servicelb.go: a Service of
// type LoadBalancer with no loadBalancerClass gets a DaemonSet whose
// klipper-lb container per port takes hostPort = the Service's port on
// every node and forwards it to the Service (newDaemonSet); the status
// lists the InternalIP of each node with a ready ServiceLB pod
// (getStatus, podIPs), none while there is none. Here the one node's
// "pod" is a TCP forwarder from addr:<port> to the process's local port,
// ready while the process is.
func (r *Runner) ServeLoadBalancers(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lbAddr = addr
	r.Kick()
}

// lbForward is one Service port published on the node's address.
type lbForward struct {
	ln     net.Listener
	mu     sync.Mutex
	target int // the process's local port; 0 while none is ready
}

// loadBalance publishes Service s, backed by p (nil when no process runs
// it), as ServiceLB would; it returns the keys of the forwards s keeps.
func (r *Runner) loadBalance(ctx context.Context, s *corev1.Service, p *Proc) []string {
	r.mu.Lock()
	addr := r.lbAddr
	r.mu.Unlock()
	if addr == "" || s.Spec.Type != corev1.ServiceTypeLoadBalancer || s.Spec.LoadBalancerClass != nil {
		return nil
	}
	var keys []string
	ready := p != nil && p.ready
	for _, sp := range s.Spec.Ports {
		if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		key := s.Namespace + "/" + s.Name + ":" + strconv.Itoa(int(sp.Port))
		target := 0
		if p != nil {
			target, _ = localPort(p.Pod, targetPort(sp))
		}
		f, err := r.forward(key, net.JoinHostPort(addr, strconv.Itoa(int(sp.Port))))
		if err != nil {
			// Another Service took the port: ServiceLB's pod would stay
			// Pending on the node, and the Service without an address.
			r.logf("ServiceLB: Service %s/%s port %d: %v", s.Namespace, s.Name, sp.Port, err)
			ready = false
			continue
		}
		keys = append(keys, key)
		f.mu.Lock()
		f.target = target
		f.mu.Unlock()
	}
	var want []corev1.LoadBalancerIngress
	if ready && len(keys) > 0 {
		want = []corev1.LoadBalancerIngress{{IP: addr}}
	}
	if !sameIngress(s.Status.LoadBalancer.Ingress, want) {
		s = s.DeepCopy()
		s.Status.LoadBalancer.Ingress = want
		if _, err := r.cs.CoreV1().Services(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
			r.logf("ServiceLB: Service %s/%s status: %v", s.Namespace, s.Name, err)
		} else {
			r.logf("ServiceLB: Service %s/%s at %v", s.Namespace, s.Name, want)
		}
	}
	return keys
}

func sameIngress(a, b []corev1.LoadBalancerIngress) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].IP != b[i].IP || a[i].Hostname != b[i].Hostname {
			return false
		}
	}
	return true
}

// forward is the forward of key, listening on hostPort, started when new.
func (r *Runner) forward(key, hostPort string) (*lbForward, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.lbs[key]; f != nil {
		return f, nil
	}
	ln, err := net.Listen("tcp", hostPort)
	if err != nil {
		return nil, err
	}
	f := &lbForward{ln: ln}
	if r.lbs == nil {
		r.lbs = map[string]*lbForward{}
	}
	r.lbs[key] = f
	go Pipe(ln, f.dial)
	return f, nil
}

// dropForwards closes the forwards whose Service no longer keeps them.
func (r *Runner) dropForwards(keep map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, f := range r.lbs {
		if !keep[key] {
			_ = f.ln.Close()
			delete(r.lbs, key)
		}
	}
}

// dial opens a connection to the process behind the Service; none while
// no process is ready.
func (f *lbForward) dial() (net.Conn, error) {
	f.mu.Lock()
	target := f.target
	f.mu.Unlock()
	if target == 0 {
		return nil, errors.New("no ready process behind the Service")
	}
	return net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(target)), 5*time.Second)
}
