// Package redact hides credentials in text labctl prints: one rule for
// every URL that reaches the terminal, a log or an error.
package redact

import (
	"regexp"
	"strings"
)

// Placeholder stands where a credential was.
const Placeholder = "REDACTED"

// credentialParam is a query parameter name that carries a credential:
// token=, access_token=, password=, X-Amz-Signature=, sig=, api_key= ...
var credentialParam = regexp.MustCompile(`(?i)token|secret|passw|pwd|auth|key|sig|credential`)

// sshSchemes keep their user name: in qemu+ssh://admin@host/system the
// user is the SSH login, not a secret (a password after it still is).
var sshSchemes = map[string]bool{"ssh": true, "qemu+ssh": true, "sftp": true, "git+ssh": true}

// URL returns s with its credentials replaced by REDACTED: the user
// information before the '@' (all of it, since a token is often written
// as the user name; only the password for SSH URLs), and the values of
// query parameters whose names say they hold credentials. Text that is no
// URL, and a URL without credentials, comes back unchanged, byte for byte.
// It works on the text itself, so a URL that does not parse is still
// redacted.
func URL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" || strings.ContainsAny(scheme, "/?#@ ") {
		return s
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user, _, hasPassword := strings.Cut(authority[:at], ":")
		switch {
		case sshSchemes[strings.ToLower(scheme)] && !hasPassword:
			// a login name only
		case sshSchemes[strings.ToLower(scheme)]:
			authority = user + ":" + Placeholder + authority[at:]
		default:
			authority = Placeholder + authority[at:]
		}
	}
	return scheme + "://" + authority + query(tail, strings.HasPrefix(strings.ToLower(scheme), "qemu"))
}

// libvirtPaths are parameters of libvirt's remote URIs whose names match
// credentialParam but whose values name files or methods, not secrets:
// keyfile= and pkipath= are paths, sshauth= a list such as privkey,agent
// (libvirt's docs/uri.rst, "Extra parameters").
var libvirtPaths = map[string]bool{"keyfile": true, "pkipath": true, "sshauth": true}

// query redacts credential parameters in the path-query-fragment tail;
// libvirt is true for a libvirt URI (qemu+ssh://...).
func query(tail string, libvirt bool) string {
	q := strings.IndexByte(tail, '?')
	if q < 0 {
		return tail
	}
	path, rest := tail[:q+1], tail[q+1:]
	frag := ""
	if h := strings.IndexByte(rest, '#'); h >= 0 {
		rest, frag = rest[:h], rest[h:]
	}
	params := strings.Split(rest, "&")
	for i, p := range params {
		if name, _, ok := strings.Cut(p, "="); ok && credentialParam.MatchString(name) && !(libvirt && libvirtPaths[strings.ToLower(name)]) {
			params[i] = name + "=" + Placeholder
		}
	}
	return path + strings.Join(params, "&") + frag
}

// Text applies URL to every URL inside free text, such as an error
// message from a library that quotes the address it dialled.
func Text(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, URL)
}

var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)
