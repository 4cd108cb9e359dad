// Package embedded holds the data compiled into labctl: version pins,
// example configs, manifests and templates. It has no logic.
package embedded

import "embed"

// FS holds every embedded file, addressed by its path in this folder.
//
//go:embed versions.yaml examples templates manifests provider upstream
var FS embed.FS

// Versions is the raw versions.yaml.
//
//go:embed versions.yaml
var Versions []byte
