package ui

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/term"
)

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

const (
	spinnerInterval = 100 * time.Millisecond
	// plainRepeatEvery limits plain progress lines whose text only differs
	// in numbers ("waiting (12s)", "waiting (13s)"), so CI logs stay short.
	plainRepeatEvery = 10 * time.Second
	clearLine        = "\r\x1b[2K"
)

// Status shows one step at a time on IO.Err, as kind does: a spinner
// redrawn in place on a terminal, plain lines otherwise, then a final
// "✓ name (1.2s)" or "✗ name (…)" line. Update may be called from any
// goroutine; Start and the ending methods from one.
type Status struct {
	w       io.Writer
	animate bool
	styles  Styles
	now     func() time.Time

	// indent leads every line: two spaces per runner this one is nested in.
	indent string

	mu     sync.Mutex
	active bool
	paused bool // a nested runner has the screen; draw nothing
	name   string
	msg    string
	start  time.Time
	frame  int
	width  int // terminal columns; 0 when unknown
	stop   chan struct{}
	done   chan struct{}
	// Last progress line printed in plain mode, for rate limiting.
	printed   string
	printedAt time.Time
}

// NewStatus returns a Status writing to s.Err.
func (s *IO) NewStatus() *Status {
	return &Status{w: s.Err, animate: s.Animate, styles: s.Styles(s.Err), now: time.Now}
}

// Nest makes st the status of a runner that runs inside parent's step:
// its lines are indented one level deeper than parent's. Pause parent
// while st draws.
func (st *Status) Nest(parent *Status) {
	st.indent = parent.indent + "  "
}

// Println prints line under the running step, above its spinner, which
// is drawn again below it: a notice from inside a step never lands on
// the spinner's row.
func (st *Status) Println(line string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	drawn := st.active && st.animate && !st.paused
	if drawn {
		st.write(clearLine)
	}
	st.write(st.indent + "  " + line + "\n")
	if drawn {
		st.draw()
	}
}

// Indent is what leads st's lines, for text printed under its steps.
func (st *Status) Indent() string { return st.indent }

// Pause stops the spinner and clears its line, so a nested runner can
// write below the last finished line; Resume draws it again. Updates
// while paused are kept, not drawn.
func (st *Status) Pause() {
	st.mu.Lock()
	if !st.active || st.paused {
		st.mu.Unlock()
		return
	}
	st.paused = true
	wait := st.takeSpinner()
	st.mu.Unlock()
	wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.animate {
		st.write(clearLine)
	}
}

// Resume undoes Pause: the running step's spinner comes back.
func (st *Status) Resume() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.paused {
		return
	}
	st.paused = false
	if !st.active || !st.animate {
		return
	}
	st.draw()
	st.stop, st.done = make(chan struct{}), make(chan struct{})
	go st.spin(st.stop, st.done)
}

// Start begins a step. A step still running is ended as a success first.
func (st *Status) Start(name string) {
	st.End(true)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.active, st.paused = true, false
	st.name, st.msg = name, ""
	st.start = st.now()
	st.printed, st.printedAt = "", time.Time{}
	if !st.animate {
		st.write(st.indent + st.styles.Dim.Render(SymbolPending) + " " + name + " ...\n")
		return
	}
	st.width = termWidth(st.w)
	st.frame = 0
	st.draw()
	st.stop, st.done = make(chan struct{}), make(chan struct{})
	go st.spin(st.stop, st.done)
}

// Update shows progress on the running step, e.g. "waiting for k3s API (12s)".
// In plain mode a line is printed only when the text changes, and at most
// every 10s when only its numbers change.
func (st *Status) Update(msg string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.active {
		return
	}
	st.msg = msg
	if st.paused {
		return
	}
	if st.animate {
		st.draw()
		return
	}
	if msg == "" || msg == st.printed {
		return
	}
	now := st.now()
	if shape(msg) == shape(st.printed) && now.Sub(st.printedAt) < plainRepeatEvery {
		return
	}
	st.printed, st.printedAt = msg, now
	st.write(st.indent + "  " + msg + "\n")
}

// Elapsed is the time since Start.
func (st *Status) Elapsed() time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.now().Sub(st.start)
}

// End finishes the step with ✓ or ✗ and the time taken.
func (st *Status) End(ok bool) {
	mark := st.styles.Fail
	if ok {
		mark = st.styles.OK
	}
	st.finish(mark, func(d time.Duration) string { return Duration(d) })
}

// OK finishes the step with ✓ and detail, e.g. "up to date".
func (st *Status) OK(detail string) { st.finish(st.styles.OK, fixed(detail)) }

// Fail finishes the step with ✗ and reason, e.g. "interrupted after 2.1s".
func (st *Status) Fail(reason string) { st.finish(st.styles.Fail, fixed(reason)) }

// Warn finishes the step with ! and detail, e.g. "would change".
func (st *Status) Warn(detail string) { st.finish(st.styles.Warn, fixed(detail)) }

func fixed(s string) func(time.Duration) string {
	return func(time.Duration) string { return s }
}

func (st *Status) finish(mark func(string) string, detail func(time.Duration) string) {
	st.mu.Lock()
	if !st.active {
		st.mu.Unlock()
		return
	}
	st.active = false
	paused := st.paused
	st.paused = false
	elapsed := st.now().Sub(st.start)
	wait := st.takeSpinner()
	st.mu.Unlock()
	// Wait for the spinner to exit so it cannot redraw over the final line.
	wait()

	st.mu.Lock()
	defer st.mu.Unlock()
	line := st.name
	if d := detail(elapsed); d != "" {
		line += " " + st.styles.Dim.Render("("+d+")")
	}
	if st.animate && !paused {
		st.write(clearLine)
	}
	st.write(st.indent + mark(line) + "\n")
}

// takeSpinner detaches the spinner goroutine; st.mu must be held. The
// returned func, called with st.mu released, waits until it has exited.
func (st *Status) takeSpinner() (wait func()) {
	stop, done := st.stop, st.done
	st.stop, st.done = nil, nil
	return func() {
		if stop != nil {
			close(stop)
			<-done
		}
	}
}

func (st *Status) spin(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(spinnerInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			st.mu.Lock()
			if st.active && !st.paused {
				st.frame++
				st.draw()
			}
			st.mu.Unlock()
		}
	}
}

// draw redraws the spinner line; st.mu must be held.
func (st *Status) draw() {
	line := st.indent + spinnerFrames[st.frame%len(spinnerFrames)] + " " + st.name
	if st.msg != "" {
		line += ": " + st.styles.Dim.Render(st.msg)
	}
	// A wrapped line cannot be redrawn with \r, so keep it to one row.
	if st.width > 1 {
		line = ansi.Truncate(line, st.width-1, "…")
	}
	st.write(clearLine + line)
}

// write ignores errors: a broken stderr must not fail the step it reports.
func (st *Status) write(s string) {
	_, _ = io.WriteString(st.w, s)
}

func termWidth(w io.Writer) int {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok || !term.IsTerminal(f.Fd()) {
		return 0
	}
	cols, _, err := term.GetSize(f.Fd())
	if err != nil {
		return 0
	}
	return cols
}

var numbers = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// shape is msg with its numbers blanked, so counters do not count as new text.
func shape(msg string) string {
	return numbers.ReplaceAllString(msg, "#")
}

// Started lists the steps a plain (not animated) status stream started,
// in order, from its "• name ..." lines at any nesting. Tests compare a
// dry run's steps with a real run's through it.
func Started(plain string) []string {
	var names []string
	for _, l := range strings.Split(plain, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimLeft(l, " "), SymbolPending+" "); ok {
			names = append(names, strings.TrimSuffix(rest, " ..."))
		}
	}
	return names
}

// Duration formats d for people: 340ms, 1.2s, 1m02s, 1h02m03s.
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if ms := d.Round(time.Millisecond); ms < time.Second {
		return fmt.Sprintf("%dms", ms.Milliseconds())
	}
	if t := d.Round(100 * time.Millisecond); t < time.Minute {
		return fmt.Sprintf("%.1fs", t.Seconds())
	}
	s := d.Round(time.Second)
	h, m, sec := int(s.Hours()), int(s.Minutes())%60, int(s.Seconds())%60
	if h > 0 {
		return fmt.Sprintf("%dh%02dm%02ds", h, m, sec)
	}
	return fmt.Sprintf("%dm%02ds", m, sec)
}
