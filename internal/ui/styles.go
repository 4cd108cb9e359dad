package ui

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Symbols lead status lines. They are the same with and without colour, so
// plain output reads the same and tests can match it.
const (
	SymbolOK      = "✓"
	SymbolFail    = "✗"
	SymbolWarn    = "!"
	SymbolPending = "•"
)

// Styles are bound to one writer. Without colour every style renders text
// unchanged.
type Styles struct {
	Success lipgloss.Style
	Failure lipgloss.Style
	Warning lipgloss.Style
	Dim     lipgloss.Style
	Header  lipgloss.Style
}

// Styles returns styles for w, coloured only when s.ColorOn(w). The
// profile is set on the renderer itself: lipgloss would otherwise detect
// one from w and the environment (CLICOLOR_FORCE), ignoring a profile
// handed to termenv, so --no-color would not remove colour. A coloured
// stream is a terminal, so basic ANSI follows the user's theme.
func (s *IO) Styles(w io.Writer) Styles {
	r := lipgloss.NewRenderer(w)
	if s.ColorOn(w) {
		r.SetColorProfile(termenv.ANSI)
	} else {
		r.SetColorProfile(termenv.Ascii)
	}
	return Styles{
		Success: r.NewStyle().Foreground(lipgloss.Color("2")),
		Failure: r.NewStyle().Foreground(lipgloss.Color("1")),
		Warning: r.NewStyle().Foreground(lipgloss.Color("3")),
		Dim:     r.NewStyle().Faint(true),
		Header:  r.NewStyle().Bold(true),
	}
}

// OK returns "✓ msg" with a green tick.
func (st Styles) OK(msg string) string { return st.Success.Render(SymbolOK) + " " + msg }

// Fail returns "✗ msg" with a red cross.
func (st Styles) Fail(msg string) string { return st.Failure.Render(SymbolFail) + " " + msg }

// Warn returns "! msg" with a yellow mark.
func (st Styles) Warn(msg string) string { return st.Warning.Render(SymbolWarn) + " " + msg }
