package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// Formats are the values Print accepts, for flag help and validation.
var Formats = []string{"text", "json", "yaml"}

// Print writes v to s.Out as "json" (indented) or "yaml", or calls text for
// "text" (also the default when format is empty). YAML goes through JSON, so
// json tags name the fields in both.
func (s *IO) Print(format string, v any, text func(w io.Writer) error) error {
	var out []byte
	switch format {
	case "", "text":
		if text == nil {
			return errors.New("text output is not available here; use -o json or -o yaml")
		}
		return text(s.Out)
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encode JSON: %w", err)
		}
		out = append(b, '\n')
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		out = b
	default:
		return fmt.Errorf("unknown output format %q (allowed: %s)", format, strings.Join(Formats, ", "))
	}
	if _, err := s.Out.Write(out); err != nil {
		return fmt.Errorf("write %s: %w", format, err)
	}
	return nil
}

// GiB writes a MiB figure as GiB with one decimal: 29.2 GiB.
func GiB(mib int) string { return fmt.Sprintf("%.1f GiB", float64(mib)/1024) }
