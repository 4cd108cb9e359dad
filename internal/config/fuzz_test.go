package config_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/labctl/labctl/internal/config"
)

// FuzzLoad feeds arbitrary bytes to the config loader. It must never panic:
// it either returns a config.ErrorList, or a lab that Marshal writes out and
// Parse reads back to the very same bytes (config view | config validate -c -).
// `go test` runs the seeds; `go test -fuzz=FuzzLoad` explores from them.
func FuzzLoad(f *testing.F) {
	var seeds []string
	for _, pattern := range []string{"testdata/invalid/*.yaml", "testdata/valid/*.yaml", "../../examples/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, files...)
	}
	if len(seeds) < 40 {
		f.Fatalf("found only %d seed files", len(seeds))
	}
	for _, path := range seeds {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		lab, src, err := config.Load(config.Request{Path: "-", Stdin: bytes.NewReader(data)})
		if src.Name != "stdin" {
			t.Fatalf("source = %+v, want stdin", src)
		}
		if err != nil {
			var list config.ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a config.ErrorList: %T %v", err, err)
			}
			for _, e := range list {
				if e.Msg == "" || e.File != "stdin" {
					t.Fatalf("error without message or file: %+v", e)
				}
			}
			if lab != nil {
				t.Fatal("Load returned a lab together with an error")
			}
			return
		}

		out1, err := config.Marshal(lab)
		if err != nil {
			t.Fatalf("Marshal of a valid lab: %v", err)
		}
		lab2, err := config.Parse("view.yaml", out1)
		if err != nil {
			t.Fatalf("the marshalled lab does not parse again: %v\ninput:\n%s\nmarshalled:\n%s", err, data, out1)
		}
		out2, err := config.Marshal(lab2)
		if err != nil {
			t.Fatalf("second Marshal: %v", err)
		}
		if !bytes.Equal(out1, out2) {
			t.Fatalf("round trip is not stable:\nfirst:\n%s\nsecond:\n%s", out1, out2)
		}
	})
}
