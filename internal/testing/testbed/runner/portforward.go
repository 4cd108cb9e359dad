package runner

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	clientportforward "k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/cri-streaming/pkg/streaming/portforward"

	"github.com/labctl/labctl/internal/testing/testbed/pki"
)

// The runner's kubelet server answers the API server's pods/portforward
// for the StatefulSet Pods the runner runs (kubectl port-forward, and
// client-go's tools/portforward, through the box's API server).
//
// What it copies: kubelet's /portForward/{podNamespace}/{podID}[/{uid}]
// routes and their checks (pkg/kubelet/server/server.go getPortForward:
// the request's V4Options, "pod does not exist" for a Pod it does not
// run, "pod not found" for another UID), then the streams are served by
// kubelet's own streaming code, k8s.io/cri-streaming's
// portforward.ServePortForward (what moved out of k8s.io/kubelet's
// pkg/cri/streaming; k8s.io/kubelet v0.37.0 no longer has it), with the
// CRI streaming server's defaults (DefaultConfig: 4 h idle, 30 s to create
// a stream). Each stream is copied to the port as containerd's
// portForward (internal/cri/server/sandbox_portforward_linux.go) copies
// it: a TCP connection, copied both ways until one way ends, the other
// given a second to end too.
//
// Its departures: kubelet hands the request to the container runtime's
// streaming server by a redirect or proxy (GetPortForward); here one
// server does both. And a pod's network here is the machine's loopback,
// where the runner moved the pod's listeners (Proc.Ports), so a port is
// dialled at 127.0.0.1:<where the process listens>, and only a port the
// pod declares or the runner moved is forwarded: any other port of the
// shared loopback is not the pod's.
//
// The API server does not check the server's certificate: the box's
// kube-apiserver (envtest's defaults, testbed.start) has no
// --kubelet-certificate-authority, and kube-apiserver's kubelet client
// then skips verification (pkg/kubelet/client/kubelet_client.go,
// transportConfig: no CA, TLS.Insecure). Nor does it present a client
// certificate (no --kubelet-client-certificate), so the server asks for
// none. Its certificate is self-signed for the Node's name and address.

const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

// kubeletServer is the runner's kubelet HTTPS server, on loopback.
type kubeletServer struct {
	srv  *http.Server
	port int
}

// serveKubelet starts the kubelet server on a reserved loopback port.
func (r *Runner) serveKubelet() (*kubeletServer, error) {
	pair, err := pki.SelfSigned([]string{NodeName}, []net.IP{pki.Loopback})
	if err != nil {
		return nil, fmt.Errorf("making the kubelet server's certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		return nil, fmt.Errorf("loading the kubelet server's certificate: %w", err)
	}
	port, err := r.reservePort()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("listening for the kubelet server: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/portForward/{namespace}/{pod}", r.servePortForward)
	mux.HandleFunc("/portForward/{namespace}/{pod}/{uid}", r.servePortForward)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		// A stream is an HTTP/1.1 upgrade (SPDY, or WebSocket), which
		// HTTP/2 cannot carry.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.logf("kubelet server: %v", err)
		}
	}()
	return &kubeletServer{srv: srv, port: port}, nil
}

// close stops the server and the streams it serves.
func (k *kubeletServer) close() { _ = k.srv.Close() }

func (r *Runner) servePortForward(w http.ResponseWriter, req *http.Request) {
	ns, name, uid := req.PathValue("namespace"), req.PathValue("pod"), types.UID(req.PathValue("uid"))
	opts, err := portforward.NewV4Options(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := r.podProc(ns + "/" + name)
	if p == nil {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	if uid != "" && p.podUID != uid {
		http.Error(w, "pod not found", http.StatusNotFound)
		return
	}
	portforward.ServePortForward(w, req, podForwarder{r}, ns+"/"+name, string(p.podUID), opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// podProc is the process of the Pod namespace/name (a StatefulSet's), nil
// when the runner runs no such Pod.
func (r *Runner) podProc(key string) *Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.procs[key]; p != nil && p.podUID != "" {
		return p
	}
	return nil
}

// podForwarder is the runtime's side of ServePortForward: pod is the
// Pod's namespace/name.
type podForwarder struct{ r *Runner }

func (f podForwarder) PortForward(ctx context.Context, pod, uid string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	p := f.r.podProc(pod)
	if p == nil || string(p.podUID) != uid {
		return fmt.Errorf("forwarding port %d of Pod %s: the runner no longer runs it", port, pod)
	}
	local, ok := forwardPort(p.Pod, port)
	if !ok {
		return fmt.Errorf("forwarding port %d of Pod %s: the Pod declares no such port and the runner moved none there", port, pod)
	}
	conn, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(local))
	if err != nil {
		return fmt.Errorf("forwarding port %d of Pod %s: %w", port, pod, err)
	}
	defer conn.Close()
	errs := make(chan error, 2)
	go func() { _, err := io.Copy(stream, conn); errs <- err }()
	go func() { _, err := io.Copy(conn, stream); errs <- err }()
	var first error
	select {
	case first = <-errs:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-errs:
		if first == nil {
			first = err
		}
	case <-time.After(time.Second):
	case <-ctx.Done():
		first = ctx.Err()
	}
	return first
}

// forwardPort is where the pod's port is on loopback: a port a process
// was moved from goes where it was moved to, a port a container declares
// stays where it is; any other port is not the pod's.
func forwardPort(pod []*Proc, port int32) (int, bool) {
	declared := false
	for _, q := range pod {
		if _, ok := q.Ports[port]; ok {
			declared = true
		}
		for _, cp := range q.container.Ports {
			if cp.ContainerPort == port {
				declared = true
			}
		}
	}
	if !declared {
		return 0, false
	}
	return localPort(pod, intstr.FromInt32(port))
}

// Forward forwards a free loopback port to port through u, a
// pods/portforward URL (the API server's, or the kubelet server's), with
// client-go's tools/portforward over SPDY, as kubectl port-forward does,
// until the test ends. It returns the local port, or why the forward
// could not start (the upgrade refused: the pod unknown to the node).
func Forward(t testing.TB, cfg *rest.Config, u *url.URL, port int) (int, error) {
	t.Helper()
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return 0, fmt.Errorf("making the SPDY round tripper for %s: %w", u, err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	ready := make(chan struct{})
	pf, err := clientportforward.NewOnAddressesWithContext(t.Context(), dialer, []string{"127.0.0.1"},
		[]string{"0:" + strconv.Itoa(port)}, ready, io.Discard, io.Discard)
	if err != nil {
		return 0, fmt.Errorf("forwarding port %d through %s: %w", port, u, err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return 0, fmt.Errorf("forwarding port %d through %s: %w", port, u, err)
	}
	// t.Context is cancelled before the cleanups run: the forward ends.
	t.Cleanup(func() { <-done })
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		return 0, fmt.Errorf("forwarding port %d through %s: the local port: %v", port, u, err)
	}
	return int(ports[0].Local), nil
}
