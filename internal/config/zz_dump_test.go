package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestZZDump(t *testing.T) {
	pat := os.Getenv("DUMP")
	if pat == "" {
		t.Skip()
	}
	files, _ := filepath.Glob(pat)
	for _, f := range files {
		data, _ := os.ReadFile(f)
		_, err := Parse(filepath.Base(f), data)
		fmt.Printf("== %s\n%v\n", f, err)
	}
}
