package step_test

import (
	"context"
	"errors"
	"testing"

	"github.com/labctl/labctl/internal/step"
)

// Found looks again while the thing does not exist (a VM not made yet, a
// secret CAPI has not written) and remembers it once it does.
func TestFoundLooksUntilItExists(t *testing.T) {
	var f step.Found[string]
	looks := 0
	exists, boom := false, error(nil)
	look := func(context.Context) (string, bool, error) {
		looks++
		return "vm-201", exists, boom
	}
	if v, ok, err := f.Get(t.Context(), look); v != "" || ok || err != nil {
		t.Fatalf("before it exists: %q %v %v", v, ok, err)
	}
	boom = errors.New("PVE down")
	if _, ok, err := f.Get(t.Context(), look); ok || err != boom {
		t.Fatalf("a failed look: %v %v", ok, err)
	}
	exists, boom = true, nil
	for range 3 {
		if v, ok, err := f.Get(t.Context(), look); v != "vm-201" || !ok || err != nil {
			t.Fatalf("once it exists: %q %v %v", v, ok, err)
		}
	}
	if looks != 3 {
		t.Errorf("looked %d times, want 3: twice before it existed, once after", looks)
	}
	var made step.Found[string]
	made.Set("vm-202")
	if v, ok, _ := made.Get(t.Context(), func(context.Context) (string, bool, error) { t.Fatal("looked after Set"); return "", false, nil }); v != "vm-202" || !ok {
		t.Errorf("after Set: %q %v", v, ok)
	}
}
