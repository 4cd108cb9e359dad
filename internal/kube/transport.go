package kube

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// WrapTransport adds a round-tripper around every request this client, and
// every client built from its RESTConfig (the Helm SDK's too), sends. Call
// it before the first request.
func (c *Client) WrapTransport(wrap func(http.RoundTripper) http.RoundTripper) {
	prev := c.config.WrapTransport
	c.config.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return wrap(rt)
	}
}

// LogRequests prints one line per request to w: when it started (since
// the first), method, URL, status and time taken, as kubectl -v=6 does. Bodies are never printed: they can
// hold secrets.
func (c *Client) LogRequests(w io.Writer) {
	var mu sync.Mutex
	start := time.Now()
	c.WrapTransport(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			began := time.Now()
			resp, err := rt.RoundTrip(r)
			status := "error"
			if err == nil {
				status = resp.Status
			}
			mu.Lock()
			fmt.Fprintf(w, "kube: +%.3fs %s %s %s in %s\n", began.Sub(start).Seconds(), r.Method, r.URL.Redacted(), status, time.Since(began).Round(time.Millisecond))
			mu.Unlock()
			return resp, err
		})
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// IsWrite reports whether r changes state on the server. Watches, lists
// and gets do not.
func IsWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}
