package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// PortForward forwards a free port of 127.0.0.1 to port of Pod
// namespace/name through the API server, as 'kubectl port-forward' does
// (client-go's tools/portforward over SPDY), until stop is called or ctx
// ends. addr is the local host:port.
func (c *Client) PortForward(ctx context.Context, namespace, name string, port int) (addr string, stop func(), err error) {
	rt, upgrader, err := spdy.RoundTripperFor(c.RESTConfig())
	if err != nil {
		return "", nil, fmt.Errorf("port-forwarding to Pod %s/%s: %w", namespace, name, err)
	}
	u, err := podURL(c.Host(), namespace, name)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	var errOut strings.Builder
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stopCh, readyCh, io.Discard, &errOut)
	if err != nil {
		return "", nil, fmt.Errorf("port-forwarding to Pod %s/%s: %w", namespace, name, err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	closed := false
	stop = func() {
		if !closed {
			closed = true
			close(stopCh)
		}
	}
	select {
	case <-readyCh:
	case err := <-done:
		if err == nil {
			err = errors.New(strings.TrimSpace(errOut.String()))
		}
		return "", nil, fmt.Errorf("port-forwarding to Pod %s/%s port %d through %s: %w", namespace, name, port, c.Host(), err)
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
	go func() {
		select {
		case <-ctx.Done():
			stop()
		case <-done:
		}
	}()
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", nil, fmt.Errorf("port-forwarding to Pod %s/%s: no local port (%v)", namespace, name, err)
	}
	return "127.0.0.1:" + strconv.Itoa(int(ports[0].Local)), stop, nil
}

// podURL is the Pod's portforward subresource on the API server (host
// may carry a path, as behind a proxy).
func podURL(host, namespace, name string) (*url.URL, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("port-forwarding to Pod %s/%s: API server %q: %w", namespace, name, host, err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/namespaces/" + namespace + "/pods/" + name + "/portforward"
	return u, nil
}
