package ui

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Colour is decided per stream: stdout redirected to a file stays plain
// while stderr is a terminal (labctl version > f), and the other way round.
func TestColorPerStream(t *testing.T) {
	for _, tc := range []struct {
		name           string
		outTTY, errTTY bool
		color          bool
		wantOut        bool
		wantErr        bool
	}{
		{"stderr terminal, stdout file", false, true, true, false, true},
		{"stdout terminal, stderr file", true, false, true, true, false},
		{"both terminals", true, true, true, true, true},
		{"both terminals, --no-color", true, true, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			s := &IO{Out: &out, Err: &errb, OutTTY: tc.outTTY, ErrTTY: tc.errTTY, Color: tc.color}
			if err := s.Table(s.Out, []string{"NAME"}, [][]string{{"a"}}); err != nil {
				t.Fatal(err)
			}
			st := s.NewStatus()
			st.Start("step")
			st.End(true)
			if got := strings.Contains(out.String(), "\x1b["); got != tc.wantOut {
				t.Errorf("stdout has escapes = %v, want %v: %q", got, tc.wantOut, out.String())
			}
			if got := strings.Contains(errb.String(), "\x1b["); got != tc.wantErr {
				t.Errorf("stderr has escapes = %v, want %v: %q", got, tc.wantErr, errb.String())
			}
		})
	}
}

// --no-color (Plain) wins over CLICOLOR_FORCE, which lipgloss's own
// detection honours: the profile is set on the renderer, not detected.
func TestPlainBeatsCliColorForce(t *testing.T) {
	t.Setenv("CLICOLOR_FORCE", "1")
	var out bytes.Buffer
	s := &IO{Out: &out, OutTTY: true, Color: true}
	s.Plain()
	if err := s.Table(s.Out, []string{"NAME"}, [][]string{{"a"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("escape codes after Plain: %q", out.String())
	}
	// A writer that is neither stream gets no colour either.
	var other bytes.Buffer
	s = &IO{Out: &out, OutTTY: true, Color: true}
	if st := s.Styles(&other); st.Header.Render("x") != "x" {
		t.Errorf("styled text for an unknown writer: %q", st.Header.Render("x"))
	}
}

func TestConfirm(t *testing.T) {
	ask := func(in string, inTTY bool, mustType string) (bool, error, string) {
		var errb bytes.Buffer
		s := &IO{In: strings.NewReader(in), Err: &errb, InTTY: inTTY, ErrTTY: true}
		ok, err := s.Confirm("Delete 2 VMs?", mustType)
		return ok, err, errb.String()
	}
	for _, tc := range []struct {
		in, mustType string
		want         bool
	}{
		{"y\n", "", true}, {"YES\n", "", true}, {"n\n", "", false}, {"", "", false}, {"yess\n", "", false},
		{"lab1\n", "lab1", true}, {"y\n", "lab1", false}, {"lab1", "lab1", true},
	} {
		ok, err, prompt := ask(tc.in, true, tc.mustType)
		if err != nil || ok != tc.want {
			t.Errorf("Confirm(%q, answer %q) = %v, %v; want %v", tc.mustType, tc.in, ok, err, tc.want)
		}
		want := "Delete 2 VMs? [y/N] "
		if tc.mustType != "" {
			want = "Delete 2 VMs? Type lab1 to confirm: "
		}
		if prompt != want {
			t.Errorf("prompt %q, want %q", prompt, want)
		}
	}
	// stdin not a terminal: never read a script's input as an answer.
	ok, err, prompt := ask("y\n", false, "")
	if ok || !errors.Is(err, ErrCannotPrompt) || !strings.Contains(err.Error(), "pass --yes") || prompt != "" {
		t.Errorf("Confirm without a terminal = %v, %v, prompt %q; want ErrCannotPrompt naming --yes and no prompt", ok, err, prompt)
	}
}

// TestNoColorOnlyWhenSet follows no-color.org: NO_COLOR set to a value
// turns colour off; set but empty it does not.
func TestNoColorOnlyWhenSet(t *testing.T) {
	t.Setenv("TERM", "xterm-256color")
	t.Setenv("NO_COLOR", "")
	if !System().Color {
		t.Error("NO_COLOR= (empty) turned colour off")
	}
	t.Setenv("NO_COLOR", "1")
	if System().Color {
		t.Error("NO_COLOR=1 left colour on")
	}
}
