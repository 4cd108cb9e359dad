package imagebuild

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Prereqs checks the tools image-builder needs, with PATH as the child
// sees it, and returns what is missing or wrong. deps is image-builder's
// make target that installs them for this build (deps-proxmox, deps-qemu).
func Prereqs(ctx context.Context, path, packerPin, deps string) error {
	var errs []error
	look := func(name string) (string, bool) { return lookPath(path, name) }
	for _, t := range []struct{ name, hint string }{
		{"make", "install make (apt install make)"},
		{"python3", "install Python 3 (apt install python3)"},
		{"ansible-playbook", "install Ansible, e.g. run 'make " + deps + "' in image-builder's images/capi or pip install ansible-core"},
	} {
		if _, ok := look(t.name); !ok {
			errs = append(errs, fmt.Errorf("%s not found on PATH: %s", t.name, t.hint))
		}
	}
	p, ok := look("packer")
	if !ok {
		errs = append(errs, fmt.Errorf("packer not found on PATH: image-builder pins %s; run 'make %s' in images/capi (it installs it in .local/bin)", packerPin, deps))
	} else if got, err := packerVersion(ctx, p); err != nil {
		errs = append(errs, err)
	} else if got != strings.TrimPrefix(packerPin, "v") {
		errs = append(errs, fmt.Errorf("%s is packer %s, but image-builder pins %s; run 'make %s' in images/capi", p, got, packerPin, deps))
	}
	return errors.Join(errs...)
}

// lookPath finds an executable in path, the child's PATH (exec.LookPath
// would search labctl's own).
func lookPath(path, name string) (string, bool) {
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

var packerVersionRe = regexp.MustCompile(`v?(\d+\.\d+\.\d+)`)

func packerVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return "", fmt.Errorf("running %s version: %w", bin, err)
	}
	m := packerVersionRe.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("%s version printed no version: %q", bin, strings.TrimSpace(string(out)))
	}
	return m[1], nil
}

// BuildError is a failed image-builder run.
type BuildError struct {
	Err      error
	LastLine string // the last Packer error line, scrubbed
	Log      string
}

func (e *BuildError) Error() string {
	s := "image-builder failed: " + e.Err.Error()
	if e.LastLine != "" {
		s += ": " + e.LastLine
	}
	return s + " (full log: " + e.Log + ")"
}

func (e *BuildError) Unwrap() error { return e.Err }

// run runs make TARGET in dir with env, writes every output line scrubbed
// (and without colour codes) to log, reports each Packer message to
// progress and returns the artifact id Packer printed, or "" when it
// printed none.
//
// Packer prints machine-readable lines only when -machine-readable is in
// its own argv, which image-builder's Makefile never passes; its human UI
// is what a real build prints. Both are read.
func run(ctx context.Context, dir, target string, env []string, sc *Scrubber, log io.Writer, logPath string, progress func(string)) (string, error) {
	mk, ok := lookPath(lookupPath(env), "make")
	if !ok {
		return "", errors.New("make not found on PATH")
	}
	cmd := exec.CommandContext(ctx, mk, target)
	cmd.Dir, cmd.Env = dir, env
	ownGroup(cmd)
	cmd.WaitDelay = 30 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting make %s in %s: %w", target, dir, err)
	}
	defer killGroup(cmd)
	done := make(chan struct{})
	var artifact, lastErr, lastMsg string
	go func() {
		defer close(done)
		r := bufio.NewReaderSize(pr, 64<<10)
		for {
			raw, err := r.ReadString('\n')
			if raw != "" {
				line := StripColor(sc.String(strings.TrimRight(raw, "\r\n")))
				_, _ = fmt.Fprintln(log, line)
				if l, ok := ParseLine(line); ok {
					if id, ok := l.Artifact(); ok {
						artifact = id
					}
					if msg, isErr, ok := l.Message(); ok && msg != "" {
						first, _, _ := strings.Cut(msg, "\n")
						if isErr {
							lastErr = first
						}
						lastMsg = first
						progress(first)
					}
				} else if t := strings.TrimSpace(line); t != "" {
					if id, ok := HumanArtifact(t); ok {
						artifact = id
					} else if dir, ok := QEMUArtifactDir(t); ok {
						artifact = dir
					} else if strings.HasPrefix(t, "--> ") || strings.Contains(t, "' errored after ") {
						// The human UI's error lines: "Build 'NAME' errored
						// after …" and, in the summary, "--> NAME: error".
						lastErr = t
					}
					if strings.HasPrefix(t, "==> ") {
						progress(t)
					}
					lastMsg = t
				}
			}
			if err != nil {
				_, _ = io.Copy(io.Discard, pr)
				return
			}
		}
	}()
	werr := cmd.Wait()
	_ = pw.Close()
	<-done
	if werr != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("image-builder stopped (full log: %s): %w", logPath, ctx.Err())
		}
		if lastErr == "" {
			lastErr = lastMsg
		}
		return "", &BuildError{Err: werr, LastLine: lastErr, Log: logPath}
	}
	return artifact, nil
}
