// Package hack holds tests of the build scripts beside them.
package hack

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/labctl/labctl/internal/versions"
)

// upstream is a git repository standing in for an upstream project on
// GitHub, reached by file:// as a clone reaches https://.
type upstream struct {
	t   *testing.T
	dir string
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("skipping: git is not installed")
	}
	u := &upstream{t: t, dir: filepath.Join(t.TempDir(), "project")}
	u.git("init", "-q", "-b", "main", u.dir)
	return u
}

func (u *upstream) git(args ...string) string {
	u.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = filepath.Dir(u.dir)
	if _, err := os.Stat(u.dir); err == nil {
		cmd.Dir = u.dir
	}
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		u.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes file (under the repository) with text and commits it,
// returning the commit hash.
func (u *upstream) commit(file, text string) string {
	u.t.Helper()
	p := filepath.Join(u.dir, file)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		u.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		u.t.Fatal(err)
	}
	u.git("add", "-A")
	u.git("commit", "-q", "-m", "change "+file)
	return u.git("rev-parse", "HEAD")
}

func (u *upstream) url() string { return "file://" + u.dir }

// srcRun runs hack/upstream-src.sh with its pins, cache and ../shared
// in the test's folders.
type srcRun struct {
	pins, cache, shared string
}

func newSrcRun(t *testing.T, pins ...string) srcRun {
	t.Helper()
	dir := t.TempDir()
	r := srcRun{pins: filepath.Join(dir, "sources"), cache: filepath.Join(dir, "src"), shared: filepath.Join(dir, "shared")}
	text := "# name url ref commit folder\n" + strings.Join(pins, "\n") + "\n"
	if err := os.WriteFile(r.pins, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r srcRun) run(t *testing.T, names ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command("./upstream-src.sh", names...)
	cmd.Env = append(os.Environ(), "TESTBED_SRC="+r.cache, "TESTBED_SOURCES="+r.pins, "LABCTL_SHARED="+r.shared, "GIT_CONFIG_GLOBAL=/dev/null")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUpstreamSourceClonedAtTheTag(t *testing.T) {
	u := newUpstream(t)
	u.commit("cluster-autoscaler/main.go", "package main // 1.34\n")
	tagged := u.commit("cluster-autoscaler/main.go", "package main // 1.35.0\n")
	u.git("tag", "-a", "-m", "release", "cluster-autoscaler-1.35.0")
	u.commit("cluster-autoscaler/main.go", "package main // after the tag\n")

	r := newSrcRun(t, "ca "+u.url()+" cluster-autoscaler-1.35.0 "+tagged+" cluster-autoscaler")
	out, errOut, err := r.run(t, "ca")
	if err != nil {
		t.Fatalf("upstream-src.sh: %v\n%s", err, errOut)
	}
	want := filepath.Join(r.cache, "ca")
	if strings.TrimSpace(out) != want {
		t.Fatalf("stdout %q, want the folder %s", out, want)
	}
	if got := readFile(t, filepath.Join(want, "main.go")); got != "package main // 1.35.0\n" {
		t.Errorf("the folder holds %q, not the tagged file", got)
	}
	if got := u.gitIn(filepath.Join(r.cache, "ca.git"), "rev-list", "--count", "HEAD"); got != "1" {
		t.Errorf("the clone has %s commits, want 1 (--depth 1)", got)
	}

	// A second run finds it and fetches nothing: the upstream may be gone.
	if err := os.RemoveAll(u.dir); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = r.run(t, "ca")
	if err != nil || strings.TrimSpace(out) != want || !strings.Contains(errOut, "ca present") {
		t.Fatalf("second run: %v, stdout %q, stderr %q; want the same folder, present", err, out, errOut)
	}
}

func (u *upstream) gitIn(dir string, args ...string) string {
	u.t.Helper()
	return u.git(append([]string{"-C", dir}, args...)...)
}

func TestUpstreamSourceFetchedAtACommit(t *testing.T) {
	u := newUpstream(t)
	pinned := u.commit("main.go", "package main // e51909f\n")
	u.commit("main.go", "package main // later on main\n")

	r := newSrcRun(t, "kamaji "+u.url()+" - "+pinned+" .")
	out, errOut, err := r.run(t, "kamaji")
	if err != nil {
		t.Fatalf("upstream-src.sh: %v\n%s", err, errOut)
	}
	dir := strings.TrimSpace(out)
	if got := readFile(t, filepath.Join(dir, "main.go")); got != "package main // e51909f\n" {
		t.Errorf("the folder holds %q, not the pinned commit's file", got)
	}
	if got := u.gitIn(filepath.Join(r.cache, "kamaji.git"), "rev-parse", "HEAD"); got != pinned {
		t.Errorf("the clone is at %s, want %s", got, pinned)
	}
}

func TestUpstreamSourceWrongCommitRefused(t *testing.T) {
	u := newUpstream(t)
	other := u.commit("main.go", "package main // 1.34\n")
	u.commit("main.go", "package main // 1.35.0\n")
	u.git("tag", "v1.35.0")

	// The tag moved, or the pin was mistyped: the tag names another commit.
	r := newSrcRun(t, "ca "+u.url()+" v1.35.0 "+other+" .")
	out, errOut, err := r.run(t, "ca")
	if err == nil {
		t.Fatalf("a tag at another commit than the pin was taken: stdout %q", out)
	}
	if !strings.Contains(errOut, "not the pinned "+other+": refused") {
		t.Errorf("stderr does not say the commit was refused:\n%s", errOut)
	}
	if out != "" {
		t.Errorf("stdout %q, want nothing", out)
	}
	left, _ := filepath.Glob(filepath.Join(r.cache, "*"))
	hidden, _ := filepath.Glob(filepath.Join(r.cache, ".*"))
	if len(left)+len(hidden) > 0 {
		t.Errorf("the refused clone left %v %v in the cache", left, hidden)
	}

	// A commit that is not in the repository at all.
	r = newSrcRun(t, "kamaji "+u.url()+" - "+strings.Repeat("e", 40)+" .")
	if _, errOut, err := r.run(t, "kamaji"); err == nil || !strings.Contains(errOut, "failed") {
		t.Errorf("fetching a commit the repository lacks: %v, stderr %q; want a failure", err, errOut)
	}

	// Not a full hash: refused before any fetch.
	r = newSrcRun(t, "kamaji "+u.url()+" - e51909f .")
	if _, errOut, err := r.run(t, "kamaji"); err == nil || !strings.Contains(errOut, "not a full 40-hex-digit hash") {
		t.Errorf("a short hash: %v, stderr %q; want it refused", err, errOut)
	}
}

func TestUpstreamSourceMirrorFirst(t *testing.T) {
	u := newUpstream(t)
	pinned := u.commit("main.go", "package main\n")
	// The URL leads nowhere: a clone would fail.
	r := newSrcRun(t, "kamaji file:///nonexistent/kamaji - "+pinned+" .")
	mirror := filepath.Join(r.shared, "upstream", "kamaji")
	if err := os.MkdirAll(mirror, 0o755); err != nil {
		t.Fatal(err)
	}
	upstreamFile := filepath.Join(mirror, "UPSTREAM")
	if err := os.WriteFile(upstreamFile, []byte("clastix/kamaji "+pinned+" (2026-03-30)\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := r.run(t, "kamaji")
	if err != nil {
		t.Fatalf("with a mirror of the pinned commit: %v\n%s", err, errOut)
	}
	dir := strings.TrimSpace(out)
	if got, err := filepath.EvalSymlinks(dir); err != nil || got != mirror {
		t.Errorf("%s leads to %q (%v), want the mirror %s", dir, got, err, mirror)
	}

	// A mirror of another commit is not used: the clone is tried, and
	// here fails, naming both.
	if err := os.Chmod(upstreamFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(upstreamFile, []byte("clastix/kamaji "+strings.Repeat("a", 40)+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = r.run(t, "kamaji")
	if err == nil {
		t.Fatal("a mirror of another commit was taken")
	}
	for _, want := range []string{"not using " + mirror, "file:///nonexistent/kamaji"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

// TestPinnedSources checks the committed pin file: every commit a full
// hash, image-builder at labctl's pin, and, where ../shared is beside the
// checkout, each mirror of the pinned commit, so CI builds from the same
// source a fresh clone fetches.
func TestPinnedSources(t *testing.T) {
	builder := "image-builder-" + versions.MustGet().ImageBuilder
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(builder) + `\s`).MatchString(readFile(t, filepath.Join("testbed", "sources"))) {
		t.Errorf("hack/testbed/sources has no %s: embedded/versions.yaml pins image-builder at that tag, and internal/testing/packertest reads it", builder)
	}
	text := readFile(t, filepath.Join("testbed", "sources"))
	hash := regexp.MustCompile(`^[0-9a-f]{40}$`)
	shared := os.Getenv("LABCTL_SHARED")
	if shared == "" {
		shared = filepath.Join("..", "..", "shared")
	}
	n := 0
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		n++
		if len(f) != 5 || !strings.HasPrefix(f[1], "https://") || !hash.MatchString(f[3]) {
			t.Errorf("hack/testbed/sources: %q: want name, https URL, tag or -, 40-digit commit, folder", line)
			continue
		}
		up := filepath.Join(shared, "upstream", f[0], "UPSTREAM")
		b, err := os.ReadFile(up)
		if err != nil {
			t.Logf("no mirror of %s (%v): a fresh clone fetches it", f[0], err)
			continue
		}
		if !strings.Contains(string(b), f[3]) {
			t.Errorf("%s does not name the pinned commit %s of %s", up, f[3], f[0])
		}
	}
	if n == 0 {
		t.Error("hack/testbed/sources pins nothing")
	}
}
