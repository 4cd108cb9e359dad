package cmdutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/mgmt"
	"github.com/labctl/labctl/internal/ui"
)

// Without --kubeconfig and before mgmt up, Mgmt says there is no
// management cluster (matching mgmt.ErrNoManagement, which mgmt down
// takes as "no workload clusters to look for") and how to get one; with
// --kubeconfig naming a missing file it says that file is missing, and
// names the setting. $KUBECONFIG counts for Mgmt, never for OwnMgmt (mgmt
// down's).
func TestMgmtWithoutACluster(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	io, _, _, _ := ui.Test()
	s := &Settings{Config: "../../examples/lab.yaml", ConfigExplicit: true}
	f := New(io, s)
	_, err := f.Mgmt(t.Context())
	if !errors.Is(err, mgmt.ErrNoManagement) || !strings.Contains(err.Error(), `no management cluster yet for lab "home"`) || !strings.Contains(err.Error(), "run 'labctl mgmt up'") {
		t.Errorf("Mgmt before mgmt up = %v", err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	s.Kubeconfig = missing
	_, err = New(io, s).Mgmt(t.Context())
	if err == nil || errors.Is(err, mgmt.ErrNoManagement) || !strings.Contains(err.Error(), "kubeconfig "+missing+" does not exist (named by --kubeconfig") {
		t.Errorf("Mgmt with a missing --kubeconfig = %v", err)
	}

	s.Kubeconfig = ""
	t.Setenv("KUBECONFIG", missing)
	_, err = New(io, s).Mgmt(t.Context())
	if err == nil || !strings.Contains(err.Error(), "$KUBECONFIG names "+missing+", and no such file exists") {
		t.Errorf("Mgmt with $KUBECONFIG naming a missing file = %v", err)
	}
	_, err = New(io, s).OwnMgmt(t.Context())
	if !errors.Is(err, mgmt.ErrNoManagement) {
		t.Errorf("OwnMgmt with $KUBECONFIG set = %v, want the lab's own (none stored yet)", err)
	}
}

// The lab is loaded once per run: stdin can be read only once.
func TestLabLoadedOnce(t *testing.T) {
	data, err := os.ReadFile("../../examples/local-kvm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	io, in, _, _ := ui.Test()
	in.Write(data)
	f := New(io, &Settings{Config: "-", ConfigExplicit: true})
	lab1, src1, err1 := f.Lab(t.Context())
	lab2, src2, err2 := f.Lab(t.Context())
	if err1 != nil || err2 != nil || lab1 == nil || lab1 != lab2 || src1 != src2 || src1.Name != "stdin" {
		t.Errorf("two loads: %p %v %v / %p %v %v; want one lab from stdin", lab1, src1, err1, lab2, src2, err2)
	}
	if in.Len() != 0 {
		t.Errorf("stdin not read")
	}
}
