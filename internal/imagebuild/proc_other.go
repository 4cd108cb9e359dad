//go:build !unix

package imagebuild

import "os/exec"

func ownGroup(*exec.Cmd)  {}
func killGroup(*exec.Cmd) {}
