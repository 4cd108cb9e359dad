package config

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in a lab config: where it is and how to fix it.
type Error struct {
	File  string // e.g. lab.yaml; empty for built-in configs
	Line  int    // 0 when the field is absent from the file
	Field string // field path, e.g. clusters[0].workers.max
	Msg   string // what is wrong and the fix

	more int // problems this entry stands for besides itself (see collect)
	// covers is a field this problem explains besides Field: an unknown
	// field names the one it was likely meant to be.
	covers string
	// absent is a field nothing of which is in the file: its line is the
	// document's, so it sorts after the problems that have a line.
	absent bool
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in one config, reported together.
type ErrorList []*Error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	if len(l) == 1 {
		return msgs[0]
	}
	return fmt.Sprintf("%d problems in lab config:\n  %s", len(l), strings.Join(msgs, "\n  "))
}

// sortByLine orders errors as they appear in the file; absent fields
// last, and the "more problems" count after everything.
func (l ErrorList) sortByLine() {
	key := func(e *Error) (int, int) {
		switch {
		case e.more > 0:
			return 3, 0
		case e.Line == 0:
			return 2, 0
		case e.absent:
			return 1, e.Line
		}
		return 0, e.Line
	}
	sort.SliceStable(l, func(i, j int) bool {
		gi, li := key(l[i])
		gj, lj := key(l[j])
		if gi != gj {
			return gi < gj
		}
		return li < lj
	})
}

// maxErrors is how many problems one report lists: a file broken in
// thousands of places needs its first problems fixed, not a flood.
const maxErrors = 50

// maxCollected is how many problems are kept before sorting by line;
// beyond it they are only counted, so a hostile file costs no memory.
const maxCollected = 1000

// collect appends e to l, or counts it once l holds maxCollected.
func (l ErrorList) collect(e *Error) ErrorList {
	if len(l) < maxCollected {
		return append(l, e)
	}
	if last := l[len(l)-1]; last.more > 0 {
		last.more++
		return l
	}
	return append(l, &Error{File: e.File, Msg: "more problems were found", more: 1})
}

// capped is l cut to maxErrors, with a last entry saying how many more.
func (l ErrorList) capped() ErrorList {
	if len(l) <= maxErrors {
		return l
	}
	rest := l[maxErrors:]
	n := 0
	for _, e := range rest {
		n++
		if e.more > 0 {
			n += e.more - 1 // the "more problems" entry is no problem itself
		}
	}
	out := append(ErrorList{}, l[:maxErrors]...)
	return append(out, &Error{File: rest[0].File, Line: rest[0].Line, Msg: fmt.Sprintf("and %d more problems from here on; fix these first", n)})
}
