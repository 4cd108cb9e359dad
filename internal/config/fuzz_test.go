package config_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
		lab, src, err := config.Load(context.Background(), config.Request{Path: "-", Stdin: bytes.NewReader(data)})
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

// FuzzMarshalFields puts arbitrary text into one string field of the owner's
// lab at a time. Whatever Marshal writes must read back as the same text:
// when that lab is valid, `config view` output is a fixed point.
func FuzzMarshalFields(f *testing.F) {
	base, err := os.ReadFile("../../examples/lab.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for i, s := range []string{"", " ", "null", "~", "0x10", "1e3", "true", "yes", "- a", "a: b", "#x", "'", "\"", "\t", "é", "a\nb", "*x", "&x", "!!str", "192.168.4.50", "v1.35.4", "@", "%"} {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		lab, err := config.Parse("lab.yaml", base)
		if err != nil {
			t.Fatal(err)
		}
		fields := stringFields(reflect.ValueOf(lab).Elem())
		field := fields[int(which)%len(fields)]
		field.SetString(value)

		out1, err := config.Marshal(lab)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		lab1, err := config.Parse("view.yaml", out1)
		if err != nil {
			return // the value is invalid; that is Validate's business
		}
		if got := stringFields(reflect.ValueOf(lab1).Elem())[int(which)%len(fields)].String(); got != value && strings.TrimSpace(value) != "" {
			t.Fatalf("wrote %q, read back %q:\n%s", value, got, out1)
		}
		out2, err := config.Marshal(lab1)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		lab2, err := config.Parse("view.yaml", out2)
		if err != nil {
			t.Fatalf("the marshalled lab does not parse again: %v\n%s", err, out2)
		}
		out3, err := config.Marshal(lab2)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if !bytes.Equal(out2, out3) {
			t.Fatalf("round trip is not stable:\n%s\n---\n%s", out2, out3)
		}
	})
}

// stringFields lists every settable string in v, depth first.
func stringFields(v reflect.Value) []reflect.Value {
	var out []reflect.Value
	switch v.Kind() {
	case reflect.String:
		out = append(out, v)
	case reflect.Pointer:
		if !v.IsNil() {
			out = append(out, stringFields(v.Elem())...)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			out = append(out, stringFields(v.Field(i))...)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			out = append(out, stringFields(v.Index(i))...)
		}
	}
	return out
}
