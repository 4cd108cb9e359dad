// Package versioninfo is the use case of 'labctl version': labctl's own build and
// every pinned upstream version, as text or data.
package versioninfo

import (
	"fmt"
	"io"
	"runtime"

	"github.com/labctl/labctl/internal/ui"
	"github.com/labctl/labctl/internal/versions"
)

// VersionInfo is what 'labctl version' reports.
type VersionInfo struct {
	Version   string        `json:"version"`
	Commit    string        `json:"commit"`
	Date      string        `json:"date"`
	GoVersion string        `json:"goVersion"`
	Platform  string        `json:"platform"`
	Pins      versions.Pins `json:"pins"`
}

// VersionOptions are the inputs of 'labctl version'.
type VersionOptions struct {
	IO     *ui.IO
	Output string
}

// Version prints labctl's own version and every pinned upstream version.
func Version(o VersionOptions) error {
	pins, err := versions.Get()
	if err != nil {
		return err
	}
	info := VersionInfo{
		Version:   versions.Version,
		Commit:    versions.Commit,
		Date:      versions.Date,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
		Pins:      pins,
	}
	return o.IO.Print(o.Output, info, func(w io.Writer) error {
		fmt.Fprintf(w, "labctl %s (commit %s, built %s, %s, %s)\n\n", info.Version, info.Commit, info.Date, info.GoVersion, info.Platform)
		var rows [][]string
		for _, pin := range pins.List() {
			rows = append(rows, []string{pin.Name, pin.Version})
		}
		return o.IO.Table(w, []string{"COMPONENT", "PINNED VERSION"}, rows)
	})
}
