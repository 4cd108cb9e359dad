package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// interrupt is the process's Ctrl-C/SIGTERM context (see CancelDialsOn).
var interrupt atomic.Pointer[context.Context]

// CancelDialsOn makes every Kubernetes connection labctl opens from now on
// end the moment ctx does: a dial, or a TLS handshake with a server that
// accepts TCP and never answers, is cut at once rather than after
// client-go's 10 s handshake timeout. A request's own context cannot do
// that alone: net/http detaches dials from the request that started them,
// and client-go's discovery and Helm's client send some requests with no
// context at all. cmd calls it once with the signal context.
func CancelDialsOn(ctx context.Context) { interrupt.Store(&ctx) }

// dialTimeout bounds one TCP connect, as client-go's default dialer does.
const dialTimeout = 30 * time.Second

// dial is every rest.Config's Dial (set in tune): a TCP dial that the
// request's context and the process's interrupt both cancel, and whose
// connection is closed when the process is interrupted, which aborts a
// TLS handshake in progress.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	base := context.Background()
	if p := interrupt.Load(); p != nil {
		base = *p
	}
	if err := base.Err(); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopDial := context.AfterFunc(base, cancel)
	defer stopDial()
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(dctx, network, addr)
	if err != nil {
		if base.Err() != nil {
			return nil, fmt.Errorf("connecting to %s: %w", addr, base.Err())
		}
		return nil, err
	}
	c := &interruptible{Conn: conn, base: base}
	c.stop = context.AfterFunc(base, func() { _ = conn.Close() })
	return c, nil
}

// interruptible is a connection that the interrupt closes. Once it has,
// reads and writes fail with the interrupt's error rather than "use of
// closed network connection", which client-go takes for a dropped
// connection and retries a second later.
type interruptible struct {
	net.Conn
	base context.Context
	once sync.Once
	stop func() bool
}

func (c *interruptible) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.base.Err() != nil {
		err = fmt.Errorf("connection to %s: %w", c.RemoteAddr(), c.base.Err())
	}
	return n, err
}

func (c *interruptible) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && c.base.Err() != nil {
		err = fmt.Errorf("connection to %s: %w", c.RemoteAddr(), c.base.Err())
	}
	return n, err
}

func (c *interruptible) Close() error {
	c.once.Do(func() { c.stop() })
	return c.Conn.Close()
}

// Origin is where a kubeconfig came from. Every request sent with it
// names it when the API server refuses or hangs (explainDial,
// explainHang), with the command that shows whether its cluster is up:
// client-go's own words ("failed to get server groups: ... connection
// refused") name neither, and by the time they reach the user nothing
// says which kubeconfig to look at.
type Origin struct {
	// Kubeconfig names it: a file's path, or the Secret that holds it.
	Kubeconfig string
	// Status shows whether its cluster is up, e.g. "labctl mgmt status".
	Status string
}

// FileOrigin is a kubeconfig file's Origin. Any cluster can be behind
// one, but most often it is the management cluster.
func FileOrigin(path string) Origin {
	return Origin{Kubeconfig: path, Status: "for the management cluster: labctl mgmt status"}
}

// explain makes every request sent with cfg report a server that refuses
// or hangs with o.
func (o Origin) explain(cfg *rest.Config) {
	cfg.Dial = explainDial(o, cfg.Dial)
	cfg.Wrap(explainHang(o))
}

// RESTConfigFromKubeconfig is clientcmd.RESTConfigFromKubeConfig with
// labctl's settings (user agent, rate limits, the interruptible dial, and
// errors that name from), for kubeconfigs held in memory such as a
// workload cluster's Secret.
func RESTConfigFromKubeconfig(data []byte, from Origin) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", from.Kubeconfig, err)
	}
	cfg.UserAgent = "labctl"
	tune(cfg)
	from.explain(cfg)
	return cfg, nil
}

// explainDial makes a failed connect name the kubeconfig that named the
// server, and a fix. An interrupt or a cancelled request is not the
// server's fault and passes through as it is. The cause stays wrapped,
// for errors.Is.
func explainDial(from Origin, next func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		var op *net.OpError
		if err == nil || ctx.Err() != nil || !errors.As(err, &op) {
			return conn, err
		}
		return nil, fmt.Errorf("the API server at %s (from kubeconfig %s) cannot be reached: %w; check that the cluster is up (%s) and that the kubeconfig's server address is right", addr, from.Kubeconfig, err, from.Status)
	}
}

// explainHang makes a server that accepted the connection and never
// finished TLS name the kubeconfig and a fix, as explainDial does for one
// that refused: net/http's own words are "net/http: TLS handshake
// timeout" (client-go's transport gives the handshake 10 s).
func explainHang(from Origin) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			var ne net.Error
			if err == nil || req.Context().Err() != nil || !errors.As(err, &ne) || !ne.Timeout() || !strings.Contains(err.Error(), "TLS handshake timeout") {
				return resp, err
			}
			return nil, fmt.Errorf("the API server at %s (from kubeconfig %s) accepted the connection but did not answer TLS within 10s: %w; check that the cluster is up and not overloaded (%s) and that the kubeconfig's server address is an API server", req.URL.Host, from.Kubeconfig, err, from.Status)
		})
	}
}
