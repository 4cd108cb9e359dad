package config

import (
	"regexp"
	"strconv"
	"strings"
)

var (
	// secretLike is a Proxmox token secret (a UUID) or another long hex key.
	secretLike = regexp.MustCompile(`^(?i:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{24,})$`)
	// secretInside finds a secret within a longer value: a UUID (as
	// Proxmox token secrets are) or a well-known token format.
	secretInside = regexp.MustCompile(`(?i:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})` +
		`|PRIVATE KEY|PVEAPIToken=|\b(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}|\bglpat-[A-Za-z0-9_-]{20,}|\bxox[abposr]-[A-Za-z0-9-]{10,}` +
		`|\bAKIA[0-9A-Z]{16}\b|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.`)
)

// looksSecret reports whether s looks like a credential: a token secret,
// a key, a private key. Such a value is never echoed in an error.
func looksSecret(s string) bool {
	return secretLike.MatchString(strings.TrimSpace(s)) || secretInside.MatchString(s)
}

// shown is s quoted for an error message, unless it looks like a secret:
// then only that is said. Errors quote what the user wrote through it.
func shown(s string) string {
	if looksSecret(s) {
		return "(a value that looks like a secret; not shown)"
	}
	return strconv.Quote(s)
}
