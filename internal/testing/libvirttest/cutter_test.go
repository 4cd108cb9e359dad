package libvirttest_test

import (
	"slices"
	"testing"

	"github.com/labctl/labctl/internal/hypervisor/libvirt"
	"github.com/labctl/labctl/internal/testing/libvirttest"
)

// Procedures of libvirt's remote protocol (src/remote/remote_protocol.x,
// libvirt 9.0).
const (
	procConnectOpen = 1
	procAuthList    = 66
)

// The Cutter sees each call the driver makes, in order, over every
// connection it wraps, and cuts in place of the call after After: Cut
// gets its procedure, and the call fails unsent.
func TestCutterCountsAndCuts(t *testing.T) {
	d := libvirttest.Start(t)
	count := &libvirttest.Cutter{}
	o := libvirt.Options{Name: "cut", URI: d.URI(), Pool: "cutpool", Network: "default", WrapConn: count.Wrap}
	for range 2 {
		drv, err := libvirt.New(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := drv.HostState(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = drv.Close()
	}
	got := count.Procedures()
	if len(got) < 6 || !slices.Equal(got[:2], []uint32{procAuthList, procConnectOpen}) {
		t.Fatalf("calls of two connections: %v; each must start with auth-list then open", got)
	}
	half := len(got) / 2
	if !slices.Equal(got[:half], got[half:]) || count.Calls() != len(got) {
		t.Errorf("two connections doing the same made %v", got)
	}

	var cutAt []uint32
	cut := &libvirttest.Cutter{After: 1, Cut: func(proc uint32) { cutAt = append(cutAt, proc) }}
	o.WrapConn = cut.Wrap
	if drv, err := libvirt.New(t.Context(), o); err == nil {
		_ = drv.Close()
		t.Fatal("a connection cut off before its open was made")
	}
	if !slices.Equal(cutAt, []uint32{procConnectOpen}) || cut.Calls() != 1 {
		t.Errorf("cut before %v after %d calls; want once, before the open (%d), after 1", cutAt, cut.Calls(), procConnectOpen)
	}
}
