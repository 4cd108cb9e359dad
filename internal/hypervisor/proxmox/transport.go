package proxmox

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"time"
)

// retryTransport gives each attempt its own timeout and retries, with
// exponential backoff and jitter, what is safe to retry:
//   - connection errors, except TLS verification failures (they are final);
//     a POST only when it never reached the server (the dial failed);
//   - 502, 503, 504 and PVE's 595/596 (a node it could not reach);
//   - a 500 on GET, PUT or DELETE unless PVE's message says it is a
//     definite answer ("does not exist", "already exists", ...).
//
// A 500 on POST is not retried here: the driver checks the real state
// instead, so a create that did happen is never made twice.
type retryTransport struct {
	base                http.RoundTripper
	attempts            int
	timeout             time.Duration
	backoff, maxBackoff time.Duration
}

// definite matches PVE 500 messages that another try would only repeat.
var definite = regexp.MustCompile(`(?i)does not exist|no such|already exists|is running|not running|guest agent|locked|refusing|not supported|permission|invalid|can't|unable to`)

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	wait := t.backoff
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(req.Context(), t.timeout)
		r := req.Clone(ctx)
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		res, err := t.base.RoundTrip(r)
		if err != nil && req.Context().Err() == nil && ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s (request timeout): %w", t.timeout, err)
		}
		retry := attempt < t.attempts && req.Context().Err() == nil && t.retryable(req.Method, res, err)
		if !retry {
			if err != nil {
				cancel()
				return nil, err
			}
			res.Body = &cancelBody{ReadCloser: res.Body, cancel: cancel}
			return res, nil
		}
		if res != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
			res.Body.Close()
		}
		cancel()
		d := wait/2 + rand.N(wait/2+1)
		timer := time.NewTimer(d)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		case <-timer.C:
		}
		wait = min(wait*2, t.maxBackoff)
	}
}

func (t *retryTransport) retryable(method string, res *http.Response, err error) bool {
	if err != nil {
		var cv *tls.CertificateVerificationError
		var ua x509.UnknownAuthorityError
		var fp *FingerprintError
		if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &fp) {
			return false
		}
		if method != http.MethodPost {
			return true
		}
		var op *net.OpError
		return errors.As(err, &op) && op.Op == "dial"
	}
	switch res.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, 595, 596:
		return true
	case http.StatusInternalServerError:
		if method == http.MethodPost {
			return false
		}
		return !definite.MatchString(res.Status) && !definite.MatchString(peekMessage(res))
	}
	return false
}

// peekMessage reads PVE's error message from the body and puts the body back.
func peekMessage(res *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(b))
	var m struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(b, &m)
	return m.Message
}

// cancelBody ends the attempt's context when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

func decodeJSON(r io.Reader, v any) error {
	return json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(v)
}
