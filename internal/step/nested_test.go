package step_test

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/step"
	"github.com/labctl/labctl/internal/ui"
)

// screen is a fake terminal: it keeps the raw stream, and the rows as a
// terminal shows them, with \r going back to the start of the row, ESC[2K
// clearing it and \n starting the next.
type screen struct {
	mu   sync.Mutex
	raw  strings.Builder
	rows []string
	col  int
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw.Write(p)
	if len(s.rows) == 0 {
		s.rows = []string{""}
	}
	str := string(p)
	for len(str) > 0 {
		switch {
		case strings.HasPrefix(str, "\x1b[2K"):
			s.rows[len(s.rows)-1] = ""
			str = str[len("\x1b[2K"):]
			continue
		case str[0] == '\r':
			s.col = 0
		case str[0] == '\n':
			s.rows = append(s.rows, "")
			s.col = 0
		default:
			r := []rune(str)[0]
			row := []rune(s.rows[len(s.rows)-1])
			if s.col < len(row) {
				row = append(row[:s.col], append([]rune{r}, row[s.col+1:]...)...)
			} else {
				row = append(row, r)
			}
			s.rows[len(s.rows)-1] = string(row)
			s.col++
			str = str[len(string(r)):]
			continue
		}
		str = str[1:]
	}
	return len(p), nil
}

func (s *screen) stream() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

func (s *screen) shown() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.rows...)
}

var took = regexp.MustCompile(` \([0-9.]+m?s\)$`)

// A runner inside another's step (mgmt install at the end of mgmt up)
// pauses the outer spinner while it draws, and indents its lines under
// the outer step: nothing of the outer line is drawn over the inner ones.
func TestNestedRunnerOnATerminal(t *testing.T) {
	term := &screen{}
	io, _, _, _ := ui.Test()
	io.Err, io.ErrTTY, io.Animate = term, true, true
	var innerStart, innerEnd int
	inner := func(ctx context.Context) error {
		step.Println(ctx, io.Err, "Management stack onto https://10.0.0.5:6443")
		innerStart = len(term.stream())
		err := (&step.Runner{IO: io}).Run(ctx, []step.Step{
			{Name: "install cert-manager", Apply: func(ctx context.Context) error {
				time.Sleep(350 * time.Millisecond) // several spinner frames
				return nil
			}},
			{Name: "install the operator", Plan: func(context.Context) ([]string, error) { return nil, nil }},
		})
		innerEnd = len(term.stream())
		time.Sleep(250 * time.Millisecond) // the outer spinner is back
		return err
	}
	err := (&step.Runner{IO: io}).Run(t.Context(), []step.Step{
		{Name: "store the kubeconfig", Apply: func(context.Context) error { return nil }},
		{Name: "mgmt install", Apply: inner},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range term.shown() {
		got = append(got, took.ReplaceAllString(r, ""))
	}
	want := []string{
		"✓ store the kubeconfig",
		"  Management stack onto https://10.0.0.5:6443",
		"  ✓ install cert-manager",
		"  ✓ install the operator (up to date)",
		"✓ mgmt install",
		"",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the terminal shows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// From the inner runner's start to its last line; what follows is the
	// outer spinner coming back as the inner runner returns.
	during := term.stream()[innerStart:innerEnd]
	during = during[:strings.LastIndex(during, "\n")+1]
	if strings.Contains(during, " mgmt install") {
		t.Errorf("the outer spinner drew while the inner runner ran: %q", during)
	}
	if !strings.Contains(during, "  ⠙ install cert-manager") {
		t.Errorf("the inner spinner did not draw, indented: %q", during)
	}
	if after := term.stream()[innerEnd:]; !regexp.MustCompile(`[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] mgmt install`).MatchString(after) {
		t.Errorf("the outer spinner did not come back after the inner runner: %q", after)
	}
}

// In plain mode (a log, CI) the inner steps' lines are indented too,
// their changes one level deeper.
func TestNestedRunnerPlain(t *testing.T) {
	io, _, _, errOut := ui.Test()
	err := (&step.Runner{IO: io}).Run(t.Context(), []step.Step{
		{Name: "mgmt install", Apply: func(ctx context.Context) error {
			return (&step.Runner{IO: io, DryRun: true}).Run(ctx, []step.Step{
				{Name: "cert-manager", Plan: changes("install chart cert-manager"), Apply: func(context.Context) error { return nil }},
			})
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := durations.ReplaceAllString(errOut.String(), "${1}D)")
	got = regexp.MustCompile(`(?m)^(\s*✓ .*[( ])[0-9]+(\.[0-9])?(ms|s)\)$`).ReplaceAllString(got, "${1}D)")
	want := "• mgmt install ...\n  • cert-manager ...\n  ! cert-manager (would change)\n    would: install chart cert-manager\n✓ mgmt install (D)\n"
	if got != want {
		t.Errorf("plain output:\n%s\nwant:\n%s", got, want)
	}
}
