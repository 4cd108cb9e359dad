package bootsim

import "testing"

// The detached JWS check against cluster-bootstrap's own vector
// (k8s.io/cluster-bootstrap v0.36.3 token/jws/jws_test.go
// TestDetachedTokenIsValid): the signature its bootstrapsigner writes is
// valid for its content, id and secret, and for nothing else.
func TestDetachedJWSAsKubeadmChecksIt(t *testing.T) {
	const (
		content = "Hello from the other side. I must have called a thousand times."
		secret  = "my voice is my passcode"
		id      = "joshua"
		sig     = "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
	)
	if !detachedJWSValid(sig, content, id, secret) {
		t.Errorf("cluster-bootstrap's valid signature is refused")
	}
	for _, c := range []struct{ what, sig, content, id, secret string }{
		{"another signature", sig + "foo", content, id, secret},
		{"other content", sig, content + ".", id, secret},
		{"another token id", sig, content, "abcdef", secret},
		{"another secret", sig, content, id, "0123456789abcdef"},
		{"no detached payload", "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9.VShe2taLd", content, id, secret},
	} {
		if detachedJWSValid(c.sig, c.content, c.id, c.secret) {
			t.Errorf("%s: accepted", c.what)
		}
	}
}
