// Package ui prints for people and for programs: styles, step status lines,
// tables and data in text, JSON or YAML. It knows nothing of labs or VMs.
package ui

import (
	"io"
	"os"

	"github.com/charmbracelet/x/term"
)

// IO is where a command reads and writes. Tests build one over buffers and
// see exactly what a user would.
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// Animate is true when Err is a terminal outside CI and NO_COLOR:
	// status lines then show a spinner and redraw in place.
	Animate bool
	// Color allows styled output; off when not a terminal, under NO_COLOR or --no-color.
	Color bool
}

// System returns the process's streams, with TTY and colour detection.
func System() *IO {
	errTTY := term.IsTerminal(os.Stderr.Fd())
	_, noColor := os.LookupEnv("NO_COLOR")
	return &IO{
		In:      os.Stdin,
		Out:     os.Stdout,
		Err:     os.Stderr,
		Animate: errTTY && !noColor && os.Getenv("CI") == "",
		Color:   errTTY && !noColor && os.Getenv("TERM") != "dumb",
	}
}

// Plain turns off animation and colour, as --no-color does.
func (s *IO) Plain() {
	s.Animate = false
	s.Color = false
}
