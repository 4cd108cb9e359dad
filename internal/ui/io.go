// Package ui prints for people and for programs: styles, step status lines,
// tables and data in text, JSON or YAML. It knows nothing of labs or VMs.
package ui

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/charmbracelet/x/term"
)

// IO is where a command reads and writes, and what each stream is, on gh's
// pkg/iostreams model: every stream says for itself whether it is a
// terminal, so stdout redirected to a file gets plain text although stderr
// is a terminal. Tests build one over buffers, marking the streams they
// want to be terminals, and see exactly what a user would.
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer

	// InTTY, OutTTY and ErrTTY say which streams are terminals.
	InTTY, OutTTY, ErrTTY bool

	// Animate is true when Err is a terminal outside CI and NO_COLOR:
	// status lines then show a spinner and redraw in place.
	Animate bool
	// Color allows styled output on the streams that are terminals; off
	// under NO_COLOR, TERM=dumb or --no-color. A stream that is not a
	// terminal never gets colour.
	Color bool
}

// System returns the process's streams, each with its own terminal check.
func System() *IO {
	// no-color.org: only a NO_COLOR with a value turns colour off.
	noColor := os.Getenv("NO_COLOR") != ""
	s := &IO{
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		InTTY:  term.IsTerminal(os.Stdin.Fd()),
		OutTTY: term.IsTerminal(os.Stdout.Fd()),
		ErrTTY: term.IsTerminal(os.Stderr.Fd()),
		Color:  !noColor && os.Getenv("TERM") != "dumb",
	}
	s.Animate = s.ErrTTY && s.Color && os.Getenv("CI") == ""
	return s
}

// Test returns an IO over buffers, for tests, as gh's iostreams.Test():
// stdin (empty until the test writes to it), stdout and stderr. No stream
// is a terminal and there is no colour; a test sets the fields it needs
// otherwise (InTTY, ErrTTY, Color, or Err = Out for one combined log).
func Test() (s *IO, in, out, errOut *bytes.Buffer) {
	in, out, errOut = &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IO{In: in, Out: out, Err: errOut}, in, out, errOut
}

// Plain turns off animation and colour on every stream, as --no-color does.
func (s *IO) Plain() {
	s.Animate = false
	s.Color = false
}

// ColorOn reports whether w gets colour: only Out or Err, only when that
// stream is a terminal, and only when colour is allowed. Any other writer
// (a file, a buffer) gets plain text.
func (s *IO) ColorOn(w io.Writer) bool {
	if !s.Color || w == nil {
		return false
	}
	return (w == s.Out && s.OutTTY) || (w == s.Err && s.ErrTTY)
}

// CanPrompt reports whether a question can be asked and answered: stdin
// and stderr (where the question goes) are both terminals.
func (s *IO) CanPrompt() bool { return s.InTTY && s.ErrTTY }

// ErrCannotPrompt means a question had to be asked but nobody can answer.
var ErrCannotPrompt = errors.New("cannot ask for confirmation: stdin is not a terminal; pass --yes to go ahead without asking")

// Confirm asks question on Err and reads the answer from In. With
// mustType empty the answer is yes or no: only "y" or "yes" (any case) is
// yes. With mustType set (a cluster's name, for a deletion, as gh's repo
// delete does) only that exact text is yes. Anything else, and end of
// input, is no. Without a terminal to ask on it returns ErrCannotPrompt
// rather than reading a script's stdin as an answer.
func (s *IO) Confirm(question, mustType string) (bool, error) {
	if !s.CanPrompt() {
		return false, fmt.Errorf("%s: %w", strings.TrimSuffix(question, "?"), ErrCannotPrompt)
	}
	if mustType == "" {
		fmt.Fprintf(s.Err, "%s [y/N] ", question)
	} else {
		fmt.Fprintf(s.Err, "%s Type %s to confirm: ", question, mustType)
	}
	answer, err := bufio.NewReader(s.In).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("reading the answer: %w", err)
	}
	a := strings.TrimSpace(answer)
	if mustType != "" {
		return a == mustType, nil
	}
	a = strings.ToLower(a)
	return a == "y" || a == "yes", nil
}

// ReadSecret asks for a secret (a passphrase) on Err and reads it from In
// without echo when In is the terminal itself; a test's In is read as one
// line. What is typed is never written anywhere. Without a terminal to
// ask on it returns an error wrapping ErrNoSecretPrompt, so the caller can
// name the environment variable that stands in for the question.
func (s *IO) ReadSecret(prompt string) (string, error) {
	if !s.CanPrompt() {
		return "", ErrNoSecretPrompt
	}
	fmt.Fprint(s.Err, prompt)
	defer fmt.Fprintln(s.Err)
	if f, ok := s.In.(*os.File); ok && term.IsTerminal(f.Fd()) {
		b, err := term.ReadPassword(f.Fd())
		if err != nil {
			return "", fmt.Errorf("reading from the terminal: %w", err)
		}
		return string(b), nil
	}
	// A byte at a time: a buffered reader would swallow the next answer.
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := s.In.Read(b)
		if n == 1 && b[0] != '\n' {
			line = append(line, b[0])
		}
		if (n == 1 && b[0] == '\n') || errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("reading the answer: %w", err)
		}
	}
	return strings.TrimRight(string(line), "\r"), nil
}

// ErrNoSecretPrompt means a secret had to be asked for but stdin or
// stderr is not a terminal.
var ErrNoSecretPrompt = errors.New("stdin is not a terminal to ask on")
