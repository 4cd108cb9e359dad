package ui

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// clock is a fake time source the test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newStatus(t *testing.T, animate, color bool) (*Status, *bytes.Buffer, *clock) {
	t.Helper()
	var buf bytes.Buffer
	s := &IO{Err: &buf, ErrTTY: color, Animate: animate, Color: color}
	st := s.NewStatus()
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st.now = c.now
	return st, &buf, c
}

func TestStatusPlain(t *testing.T) {
	st, buf, c := newStatus(t, false, false)
	st.Start("create VM")
	c.advance(1200 * time.Millisecond)
	st.End(true)
	st.Start("start VM")
	c.advance(300 * time.Millisecond)
	st.End(false)
	st.Start("check image")
	st.OK("up to date")
	st.Start("wait for k3s")
	st.Fail("interrupted after 2.1s")
	st.Start("upload snippet")
	st.Warn("would change")

	want := `• create VM ...
✓ create VM (1.2s)
• start VM ...
✗ start VM (300ms)
• check image ...
✓ check image (up to date)
• wait for k3s ...
✗ wait for k3s (interrupted after 2.1s)
• upload snippet ...
! upload snippet (would change)
`
	if got := buf.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestStatusPlainProgressRateLimit(t *testing.T) {
	st, buf, c := newStatus(t, false, false)
	st.Start("start k3s")
	for i := 1; i <= 12; i++ {
		c.advance(time.Second)
		st.Update(fmt.Sprintf("waiting for k3s API (%ds)", i))
	}
	st.Update("waiting for k3s API (12s)") // same text: never repeated
	c.advance(time.Second)
	st.Update("waiting for nodes") // new text: shown at once
	st.Update("")
	c.advance(time.Second)
	st.End(true)
	st.Update("late update") // after End: ignored

	want := `• start k3s ...
  waiting for k3s API (1s)
  waiting for k3s API (11s)
  waiting for nodes
✓ start k3s (14.0s)
`
	if got := buf.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestStatusStartEndsRunningStep(t *testing.T) {
	st, buf, c := newStatus(t, false, false)
	st.Start("one")
	c.advance(50 * time.Millisecond)
	st.Start("two")
	st.End(true)
	st.End(false) // already ended: no output

	want := "• one ...\n✓ one (50ms)\n• two ...\n✓ two (0ms)\n"
	if got := buf.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestStatusAnimated(t *testing.T) {
	st, buf, c := newStatus(t, true, false)
	st.Start("create VM")
	st.Update("cloning template")
	time.Sleep(350 * time.Millisecond) // a few spinner frames
	c.advance(1200 * time.Millisecond)
	st.End(true)

	got := buf.String()
	if !strings.Contains(got, "\r") {
		t.Errorf("animated output has no carriage return: %q", got)
	}
	frames := 0
	for _, f := range spinnerFrames {
		if strings.Contains(got, f+" create VM") {
			frames++
		}
	}
	if frames < 2 {
		t.Errorf("want at least 2 spinner frames, got %d in %q", frames, got)
	}
	if !strings.Contains(got, "create VM: cloning template") {
		t.Errorf("progress not shown: %q", got)
	}
	if want := clearLine + "✓ create VM (1.2s)\n"; !strings.HasSuffix(got, want) {
		t.Errorf("output ends %q, want suffix %q", got[max(0, len(got)-60):], want)
	}

	// Nothing is drawn once the step has ended.
	n := buf.Len()
	time.Sleep(250 * time.Millisecond)
	if buf.Len() != n {
		t.Errorf("spinner kept drawing after End: %q", buf.String()[n:])
	}
}

func TestNoEscapesWithoutColor(t *testing.T) {
	st, buf, _ := newStatus(t, false, false)
	st.Start("a")
	st.Update("waiting")
	st.End(true)
	st.Start("b")
	st.Fail("boom")
	st.Start("c")
	st.Warn("would change")
	s := &IO{Out: buf}
	if err := s.Table(buf, []string{"NAME", "STATUS"}, [][]string{{"vm1", "running"}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "\x1b") {
		t.Errorf("escape codes without colour: %q", buf.String())
	}
}

func TestColorStyles(t *testing.T) {
	st, buf, _ := newStatus(t, false, true)
	st.Start("a")
	st.End(true)
	got := buf.String()
	if !strings.Contains(got, "\x1b[") {
		t.Errorf("no escape codes with colour: %q", got)
	}
	if plain := ansi.Strip(got); !strings.HasPrefix(plain, "• a ...\n✓ a (") {
		t.Errorf("coloured output reads %q once stripped", plain)
	}
}

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0ms"},
		{0, "0ms"},
		{340 * time.Millisecond, "340ms"},
		{999*time.Millisecond + 600*time.Microsecond, "1.0s"},
		{1240 * time.Millisecond, "1.2s"},
		{59940 * time.Millisecond, "59.9s"},
		{59960 * time.Millisecond, "1m00s"},
		{62 * time.Second, "1m02s"},
		{time.Hour + 2*time.Minute + 3*time.Second, "1h02m03s"},
	} {
		if got := Duration(tc.d); got != tc.want {
			t.Errorf("Duration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestTablePlain(t *testing.T) {
	var buf bytes.Buffer
	s := &IO{Out: &buf}
	err := s.Table(&buf, []string{"NAME", "NODE", "STATUS", "READY"}, [][]string{
		{"mgmt", "pv1-1", "running", "✓"},
		{"worker-long-name", "pv1-2", "stopped"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `NAME               NODE    STATUS    READY
mgmt               pv1-1   running   ✓
worker-long-name   pv1-2   stopped
`
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestTableColorKeepsAlignment(t *testing.T) {
	var buf bytes.Buffer
	s := &IO{Out: &buf, OutTTY: true, Color: true}
	if err := s.Table(&buf, []string{"NAME", "STATUS"}, [][]string{{"worker-1", "ok"}}); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	if !strings.Contains(got, "\x1b[1m") {
		t.Errorf("header not bold: %q", got)
	}
	want := "NAME       STATUS\nworker-1   ok\n"
	if plain := ansi.Strip(got); plain != want {
		t.Errorf("stripped table:\n%s\nwant:\n%s", plain, want)
	}
}

type vm struct {
	Name   string   `json:"name"`
	ID     int      `json:"vmid"`
	Tags   []string `json:"tags,omitempty"`
	Secret string   `json:"-"`
}

func TestPrint(t *testing.T) {
	v := vm{Name: "mgmt", ID: 201, Tags: []string{"labctl"}, Secret: "x"}
	text := func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s is VM %d\n", v.Name, v.ID)
		return err
	}
	for _, tc := range []struct{ format, want string }{
		{"json", "{\n  \"name\": \"mgmt\",\n  \"vmid\": 201,\n  \"tags\": [\n    \"labctl\"\n  ]\n}\n"},
		{"yaml", "name: mgmt\ntags:\n- labctl\nvmid: 201\n"},
		{"text", "mgmt is VM 201\n"},
		{"", "mgmt is VM 201\n"},
	} {
		var buf bytes.Buffer
		s := &IO{Out: &buf}
		if err := s.Print(tc.format, v, text); err != nil {
			t.Fatalf("Print(%q): %v", tc.format, err)
		}
		if got := buf.String(); got != tc.want {
			t.Errorf("Print(%q):\n%s\nwant:\n%s", tc.format, got, tc.want)
		}
	}
}

func TestPrintErrors(t *testing.T) {
	var buf bytes.Buffer
	s := &IO{Out: &buf}
	err := s.Print("xml", vm{}, nil)
	if err == nil || err.Error() != `unknown output format "xml" (allowed: text, json, yaml)` {
		t.Errorf("unknown format error = %v", err)
	}
	if err := s.Print("text", vm{}, nil); err == nil {
		t.Error("text with no text func: want error")
	}
	boom := errors.New("boom")
	if err := s.Print("text", vm{}, func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("text error = %v, want boom", err)
	}
	if err := s.Print("json", func() {}, nil); err == nil || !strings.HasPrefix(err.Error(), "encode JSON: ") {
		t.Errorf("unencodable value error = %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q on error", buf.String())
	}
}
