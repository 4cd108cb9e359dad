package ui

import (
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// columnGap separates table columns, as in kubectl get.
const columnGap = "   "

// Table writes headers and rows to w as left-aligned columns. Trailing
// spaces are trimmed so the plain text is stable for tests and scripts.
// Rows may be shorter than headers; missing cells are blank.
func (s *IO) Table(w io.Writer, headers []string, rows [][]string) error {
	ncol := len(headers)
	for _, r := range rows {
		ncol = max(ncol, len(r))
	}
	widths := make([]int, ncol)
	measure := func(cells []string) {
		for i, c := range cells {
			widths[i] = max(widths[i], ansi.StringWidth(c))
		}
	}
	measure(headers)
	for _, r := range rows {
		measure(r)
	}

	st := s.Styles(w)
	var b strings.Builder
	line := func(cells []string, style func(string) string) {
		var l strings.Builder
		for i := range ncol {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			if i > 0 {
				l.WriteString(columnGap)
			}
			// Pad by the plain width so styling never shifts columns.
			l.WriteString(style(c))
			l.WriteString(strings.Repeat(" ", widths[i]-ansi.StringWidth(c)))
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	if len(headers) > 0 {
		line(headers, func(c string) string {
			if c == "" {
				return c
			}
			return st.Header.Render(c)
		})
	}
	for _, r := range rows {
		line(r, func(c string) string { return c })
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
