package runner

import (
	"context"
	"crypto/tls"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // kubelet's probes do not verify

// managedBy marks the EndpointSlices the runner writes, so the
// EndpointSlice controller (which manages only its own) leaves them alone.
const managedBy = "labctl-test-bed-runner"

// endpoints plays the EndpointSlice controller for the Services that
// select a process here: one slice per Service, its endpoint the process
// on loopback, each port the process's local port for the Service's
// targetPort, ready when the process is. With the API server routing to
// endpoints (testbed.WithEndpointRouting), a webhook configuration or CRD
// conversion webhook naming the Service reaches the process, and the
// serving certificate is checked against the Service's DNS name as in a
// real cluster; the configurations are left as their owners wrote them.
//
// The endpoint's address type is FQDN with the name 127.0.0.1: an IPv4
// endpoint may not be a loopback address (EndpointSlice validation), and
// the API server's endpoint resolver dials the first address as given.
func (r *Runner) endpoints(ctx context.Context) {
	svcs, err := r.cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	procs := r.Procs()
	var named []string
	var ports []int
	lbs := map[string]bool{}
	defer func() {
		r.writeHosts(named)
		r.Reach(ports...)
		r.dropForwards(lbs)
	}()
	for i := range svcs.Items {
		s := &svcs.Items[i]
		var p *Proc
		if len(s.Spec.Selector) > 0 {
			sel := labels.SelectorFromSet(s.Spec.Selector)
			for _, cand := range procs {
				if ns, _, _ := strings.Cut(cand.Deployment, "/"); ns == s.Namespace && cand.Running() && sel.Matches(labels.Set(cand.labels)) {
					p = cand
				}
			}
		}
		for _, k := range r.loadBalance(ctx, s, p) {
			lbs[k] = true
		}
		name := s.Name + "-runner"
		if p == nil {
			err := r.cs.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
			if err == nil {
				r.logf("Service %s/%s: no process behind it any more", s.Namespace, s.Name)
			}
			continue
		}
		if servesItsPorts(s, p) {
			named = append(named, s.Name+"."+s.Namespace+".svc")
			// A StatefulSet's Pod has a name of its own under its
			// governing Service: <pod>.<service>.<namespace>.svc.
			if p.hostname != "" && p.subdomain == s.Name {
				named = append(named, p.hostname+"."+s.Name+"."+s.Namespace+".svc")
			}
			for _, sp := range s.Spec.Ports {
				ports = append(ports, int(sp.Port))
			}
		}
		want := slice(s, p, name)
		have, err := r.cs.DiscoveryV1().EndpointSlices(s.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := r.cs.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, want, metav1.CreateOptions{}); err != nil {
				r.logf("Service %s/%s: writing its EndpointSlice: %v", s.Namespace, s.Name, err)
				continue
			}
			r.logf("Service %s/%s now leads to %s on 127.0.0.1 (ports %v)", s.Namespace, s.Name, p, p.Ports)
		case err != nil:
			continue
		case !sameSlice(have, want):
			have.Endpoints, have.Ports, have.Labels = want.Endpoints, want.Ports, want.Labels
			if _, err := r.cs.DiscoveryV1().EndpointSlices(s.Namespace).Update(ctx, have, metav1.UpdateOptions{}); err != nil {
				r.logf("Service %s/%s: updating its EndpointSlice: %v", s.Namespace, s.Name, err)
				r.Kick()
			}
		}
	}
}

func slice(s *corev1.Service, p *Proc, name string) *discoveryv1.EndpointSlice {
	var ports []discoveryv1.EndpointPort
	for _, sp := range s.Spec.Ports {
		local, ok := localPort(p.Pod, targetPort(sp))
		if !ok {
			continue
		}
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Port: ptr.To(int32(local)), Protocol: ptr.To(proto)})
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: s.Name, discoveryv1.LabelManagedBy: managedBy,
		}},
		AddressType: discoveryv1.AddressTypeFQDN,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"127.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(p.ready)},
		}},
		Ports: ports,
	}
}

func targetPort(sp corev1.ServicePort) intstr.IntOrString {
	target := sp.TargetPort
	if target.IntValue() == 0 && target.StrVal == "" {
		target = intstr.FromInt32(sp.Port)
	}
	return target
}

// servesItsPorts says whether the process listens on each of the
// Service's ports as they are, so that a client dialing
// <service>.<namespace>.svc:<port> on loopback reaches it: a
// TenantControlPlane's Service and its kube-apiserver, whose port the
// runner keeps (Image.PodPorts).
func servesItsPorts(s *corev1.Service, p *Proc) bool {
	if len(s.Spec.Ports) == 0 {
		return false
	}
	for _, sp := range s.Spec.Ports {
		if local, ok := localPort(p.Pod, targetPort(sp)); !ok || local != int(sp.Port) {
			return false
		}
	}
	return true
}

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	if len(a.Endpoints) != 1 || len(a.Ports) != len(b.Ports) || a.Labels[discoveryv1.LabelManagedBy] != managedBy {
		return false
	}
	if r := a.Endpoints[0].Conditions.Ready; r == nil || *r != *b.Endpoints[0].Conditions.Ready {
		return false
	}
	for i := range a.Ports {
		if *a.Ports[i].Name != *b.Ports[i].Name || *a.Ports[i].Port != *b.Ports[i].Port {
			return false
		}
	}
	return true
}
