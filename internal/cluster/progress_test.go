package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/labctl/labctl/internal/ui"
)

// The controller can make the new machine before labctl first looks:
// the first look must still report it as created, and must not report
// the old machine that stood before the stage began.
func TestProgressLinesFirstLookNamesOnlyTheNewMachine(t *testing.T) {
	io, _, _, errOut := ui.Test()
	seen, firstSeen := map[string]machineState{}, map[string]time.Time{}
	began := time.Now()
	now := map[string]machineState{
		"cp-new": {version: "v1.35.4"},
		"cp-old": {version: "v1.35.3", running: true},
	}
	rec := progressLines(context.Background(), io, "control plane", "v1.35.4", began, seen, firstSeen, now, nil)
	out := errOut.String()
	if !strings.Contains(out, "+ cp-new v1.35.4 created (") {
		t.Errorf("first look lacks the new machine:\n%s", out)
	}
	if strings.Contains(out, "cp-old") {
		t.Errorf("first look reports the machine that was there before:\n%s", out)
	}
	if len(rec) != 1 || rec[0].Name != "cp-new" {
		t.Errorf("recorded %+v, want only cp-new", rec)
	}

	// Later looks: the new machine runs, the old one goes.
	errOut.Reset()
	now = map[string]machineState{"cp-new": {version: "v1.35.4", running: true}}
	rec = progressLines(context.Background(), io, "control plane", "v1.35.4", began, seen, firstSeen, now, rec)
	out = errOut.String()
	for _, want := range []string{"✓ cp-new v1.35.4 running (", "- cp-old v1.35.3 deleted ("} {
		if !strings.Contains(out, want) {
			t.Errorf("second look lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "created") {
		t.Errorf("second look reports a creation again:\n%s", out)
	}
}
