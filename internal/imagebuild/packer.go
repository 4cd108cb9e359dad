package imagebuild

import (
	"bytes"
	"regexp"
	"strings"
)

// Line is one parsed Packer -machine-readable line:
// timestamp,target,type,data...
type Line struct {
	Target, Type string
	Data         []string
}

// ParseLine parses a machine-readable line; ok is false for other output
// (make's own lines, for example).
func ParseLine(s string) (Line, bool) {
	f := strings.Split(strings.TrimRight(s, "\r\n"), ",")
	if len(f) < 3 || f[0] == "" || strings.Trim(f[0], "0123456789") != "" {
		return Line{}, false
	}
	data := f[3:]
	for i, d := range data {
		// Packer escapes commas and newlines inside data.
		d = strings.ReplaceAll(d, "%!(PACKER_COMMA)", ",")
		data[i] = strings.ReplaceAll(strings.ReplaceAll(d, `\n`, "\n"), `\r`, "")
	}
	return Line{Target: f[1], Type: f[2], Data: data}, true
}

// Artifact returns the artifact id of an `artifact,0,id,<VMID>` line.
func (l Line) Artifact() (string, bool) {
	if l.Type == "artifact" && len(l.Data) >= 3 && l.Data[1] == "id" {
		return l.Data[2], true
	}
	return "", false
}

// ansiRe matches the terminal colour codes of Packer's ColoredUi, which
// image-builder turns on (PACKER_FLAGS += -color=true for build targets).
var ansiRe = regexp.MustCompile("\x1b\\[[0-9;]*m")

// StripColor drops terminal colour codes from a line of Packer's output.
func StripColor(s string) string { return ansiRe.ReplaceAllString(s, "") }

// humanArtifactRe is the line packer build prints for each artifact in its
// human UI (hashicorp/packer v1.9.5 command/build.go: "--> NAME: " +
// Artifact.String()), with the Proxmox plugin's String() "A template was
// created: <VMID>" (packer-plugin-proxmox builder/proxmox/common/artifact.go).
var humanArtifactRe = regexp.MustCompile(`^--> .+: A template was created: (\d+)\s*$`)

// HumanArtifact returns the VMID of a colour-stripped human UI artifact
// line. image-builder's Makefile runs packer build without
// -machine-readable, so this is the line a real build prints.
func HumanArtifact(line string) (string, bool) {
	m := humanArtifactRe.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Message is the human text of a ui line (say, message, error) and whether
// it is an error.
func (l Line) Message() (msg string, isErr, ok bool) {
	if l.Type != "ui" || len(l.Data) < 2 {
		return "", false, false
	}
	return strings.TrimSpace(strings.Join(l.Data[1:], ",")), l.Data[0] == "error", true
}

// Scrubber replaces secrets in text; Packer's machine-readable mode does
// not scrub them itself.
type Scrubber struct{ secrets [][]byte }

// NewScrubber scrubs each non-empty secret.
func NewScrubber(secrets ...string) *Scrubber {
	s := &Scrubber{}
	for _, x := range secrets {
		if x != "" {
			s.secrets = append(s.secrets, []byte(x))
		}
	}
	return s
}

// Bytes returns b with every secret replaced by <redacted>.
func (s *Scrubber) Bytes(b []byte) []byte {
	for _, x := range s.secrets {
		b = bytes.ReplaceAll(b, x, []byte("<redacted>"))
	}
	return b
}

// String is Bytes for strings.
func (s *Scrubber) String(x string) string { return string(s.Bytes([]byte(x))) }
