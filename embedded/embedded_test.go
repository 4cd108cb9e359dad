package embedded

import (
	"bytes"
	"os"
	"testing"
)

// The built-in default lab is examples/local-kvm.yaml; the two copies must not drift.
func TestBuiltinExampleMatchesExamplesFolder(t *testing.T) {
	want, err := os.ReadFile("../examples/local-kvm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := FS.ReadFile("examples/local-kvm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("embedded/examples/local-kvm.yaml differs from examples/local-kvm.yaml: copy one over the other")
	}
}
