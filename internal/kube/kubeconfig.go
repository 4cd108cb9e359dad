package kube

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/labctl/labctl/internal/files"
	"github.com/labctl/labctl/internal/userhome"
)

// Mgmt names the management cluster's kubeconfig and where that choice
// came from, so that errors can say which setting to fix.
type Mgmt struct {
	// Path is one file, or $KUBECONFIG's list of files (joined with the
	// OS's list separator, as the variable holds them).
	Path string
	// From is "--kubeconfig", "$KUBECONFIG" or "stored".
	From string
	// Note, when set, is a line to show the user: $KUBECONFIG is used
	// though labctl stored a kubeconfig of its own for this lab.
	Note string
	lab  string
}

// Where the management kubeconfig came from.
const (
	FromFlag   = "--kubeconfig"
	FromEnv    = "$KUBECONFIG"
	FromStored = "stored"
)

// ErrNoMgmt means nothing names a management kubeconfig: no flag, no
// $KUBECONFIG, and labctl stored none for the lab (mgmt up never ran).
var ErrNoMgmt = errors.New("no management cluster yet")

// MgmtKubeconfig picks the management cluster's kubeconfig, as kubectl
// and clusterctl pick theirs: explicit (the --kubeconfig flag, or
// LABCTL_KUBECONFIG, which cmd/ folds into it) wins, then $KUBECONFIG,
// then the one labctl stored for lab ($XDG_CONFIG_HOME/labctl/<lab>/
// mgmt.kubeconfig). labctl never falls back to ~/.kube/config: a lab's
// management cluster is not whatever cluster kubectl happens to point at.
func MgmtKubeconfig(explicit, lab string) (Mgmt, error) {
	stored, storedErr := MgmtKubeconfigPath(lab)
	switch env := os.Getenv("KUBECONFIG"); {
	case explicit != "":
		return Mgmt{Path: explicit, From: FromFlag, lab: lab}, nil
	case env != "":
		m := Mgmt{Path: env, From: FromEnv, lab: lab}
		if storedErr == nil {
			if _, err := os.Stat(stored); err == nil && !sameList(env, stored) {
				m.Note = fmt.Sprintf("using $KUBECONFIG (%s) for the management cluster, not the kubeconfig labctl stored for lab %s (%s): unset KUBECONFIG or pass --kubeconfig %s to use that one", env, lab, stored, stored)
			}
		}
		return m, nil
	case storedErr != nil:
		return Mgmt{}, storedErr
	}
	return Mgmt{Path: stored, From: FromStored, lab: lab}, nil
}

// OwnMgmtKubeconfig is MgmtKubeconfig without $KUBECONFIG: for mgmt
// down, whose cluster is the VM labctl made for lab, reached through the
// kubeconfig labctl stored for it. $KUBECONFIG usually points at some
// other cluster, whose Clusters down must never list or delete.
func OwnMgmtKubeconfig(explicit, lab string) (Mgmt, error) {
	if explicit != "" {
		return Mgmt{Path: explicit, From: FromFlag, lab: lab}, nil
	}
	stored, err := MgmtKubeconfigPath(lab)
	if err != nil {
		return Mgmt{}, err
	}
	m := Mgmt{Path: stored, From: FromStored, lab: lab}
	if env := os.Getenv("KUBECONFIG"); env != "" && !sameList(env, stored) {
		m.Note = fmt.Sprintf("using the kubeconfig labctl stored for lab %s (%s), not $KUBECONFIG (%s): mgmt down checks and removes only this lab's own management cluster; pass --kubeconfig to name another", lab, stored, env)
	}
	return m, nil
}

func sameList(list, path string) bool {
	parts := filepath.SplitList(list)
	return len(parts) == 1 && filepath.Clean(parts[0]) == filepath.Clean(path)
}

// Files are the kubeconfig files m names, in order.
func (m Mgmt) Files() []string { return filepath.SplitList(m.Path) }

// Check reports, before anything connects, a kubeconfig that is not
// there, naming the setting that named it. For the stored one the error
// wraps ErrNoMgmt.
func (m Mgmt) Check() error {
	var missing []string
	for _, f := range m.Files() {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, f)
		} else if err != nil {
			return fmt.Errorf("reading kubeconfig %s (from %s): %w", f, m.From, err)
		}
	}
	switch {
	case len(missing) == 0:
		return nil
	case m.From == FromStored:
		return fmt.Errorf("%w for lab %q (no kubeconfig at %s): run 'labctl mgmt up', or name one with --kubeconfig or $KUBECONFIG", ErrNoMgmt, m.lab, m.Path)
	case m.From == FromFlag:
		return fmt.Errorf("kubeconfig %s does not exist (named by --kubeconfig or LABCTL_KUBECONFIG): check the path", m.Path)
	case len(missing) < len(m.Files()):
		return nil // kubectl skips the missing files of a $KUBECONFIG list
	}
	return fmt.Errorf("$KUBECONFIG names %s, and no such file exists: fix or unset KUBECONFIG, or pass --kubeconfig", strings.Join(missing, ", "))
}

// Connect checks m and connects to the cluster it names.
func (m Mgmt) Connect() (*Client, error) { return m.ConnectWith(Connect) }

// ConnectWith is Connect through connect (the command factory's, which
// tests wrap): the error of a kubeconfig the user named says which setting
// named it.
func (m Mgmt) ConnectWith(connect func(path string) (*Client, error)) (*Client, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	c, err := connect(m.Path)
	if err != nil && m.From != FromStored {
		return nil, fmt.Errorf("%w (from %s)", err, m.From)
	}
	return c, err
}

// loadRaw reads the kubeconfig at path, or merges the files of a path
// list as kubectl does: the first file to set a value wins, missing files
// are skipped.
func loadRaw(path string) (*clientcmdapi.Config, error) {
	files := filepath.SplitList(path)
	if len(files) <= 1 {
		return clientcmd.LoadFromFile(path)
	}
	return (&clientcmd.ClientConfigLoadingRules{Precedence: files}).Load()
}

// WriteKubeconfig writes a kubeconfig to path with mode 0600. An existing
// file is refused unless force: it may be another cluster's credentials,
// and nothing would bring them back.
func WriteKubeconfig(path string, data []byte, force bool) error {
	if _, err := os.Lstat(path); err == nil && !force {
		return fmt.Errorf("%s already exists; pass --force to overwrite it, or --merge to add the context to your kubeconfig", path)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	return files.WritePrivate(path, data)
}

// MergeTarget is the file kubectl would write a new context into: the
// first file of $KUBECONFIG that exists, else its last, else
// ~/.kube/config (kubectl's own default; kind picks the same one, in its
// pkg/cluster/internal/kubeconfig/internal/kubeconfig/paths.go).
//
// labctl's own stored kubeconfigs are never the target: merged into, the
// management kubeconfig would make a workload cluster current, and every
// later labctl command would take it for the management cluster. They are
// skipped in a $KUBECONFIG list, and refused when nothing else is left.
func MergeTarget() (string, error) {
	if env := filepath.SplitList(os.Getenv("KUBECONFIG")); len(env) > 0 {
		var list, stored []string
		for _, f := range env {
			if files.IsState(f) {
				stored = append(stored, f)
			} else {
				list = append(list, f)
			}
		}
		if len(list) == 0 {
			return "", fmt.Errorf("$KUBECONFIG names only %s, which labctl stored for a lab, and labctl never merges into the kubeconfig it stored for a lab: "+
				"use --write FILE and add FILE to $KUBECONFIG, or add a file of your own to the list, e.g. export KUBECONFIG=$KUBECONFIG:~/.kube/config", strings.Join(stored, ", "))
		}
		for _, f := range list {
			if _, err := os.Stat(f); err == nil {
				return f, nil
			}
		}
		return list[len(list)-1], nil
	}
	home, err := userhome.Dir()
	if err != nil {
		return "", fmt.Errorf("finding ~/.kube/config: %w", err)
	}
	return filepath.Join(home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName), nil
}

// MergeKubeconfig adds the current context of data to the kubeconfig at
// target under one name (its context, cluster and user all take name, so
// k3s's "default" entries clash with nothing), makes it the current
// context, and writes target back with mode 0600. Other contexts stay as
// they were; merging the same name again replaces it. A missing target is
// created.
func MergeKubeconfig(target string, data []byte, name string) error {
	in, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig to merge: %w", err)
	}
	ctx, ok := in.Contexts[in.CurrentContext]
	if !ok {
		return fmt.Errorf("the kubeconfig to merge has no current context (%q)", in.CurrentContext)
	}
	cluster, okc := in.Clusters[ctx.Cluster]
	user, oku := in.AuthInfos[ctx.AuthInfo]
	if !okc || !oku {
		return fmt.Errorf("the kubeconfig to merge: context %q names a cluster or user it does not hold", in.CurrentContext)
	}
	out := clientcmdapi.NewConfig()
	if _, err := os.Stat(target); err == nil {
		if out, err = clientcmd.LoadFromFile(target); err != nil {
			return fmt.Errorf("reading %s to merge into it (left as it was): %w", target, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s to merge into it: %w", target, err)
	}
	c := ctx.DeepCopy()
	c.Cluster, c.AuthInfo, c.LocationOfOrigin = name, name, ""
	cl := cluster.DeepCopy()
	cl.LocationOfOrigin = ""
	u := user.DeepCopy()
	u.LocationOfOrigin = ""
	out.Clusters[name], out.AuthInfos[name], out.Contexts[name] = cl, u, c
	out.CurrentContext = name
	merged, err := clientcmd.Write(*out)
	if err != nil {
		return fmt.Errorf("writing %s: %w", target, err)
	}
	return files.WritePrivate(target, merged)
}

// ExportOptions say where 'mgmt kubeconfig' and 'cluster kubeconfig' put
// a kubeconfig: stdout, a file of its own (Write), or merged into the
// user's kubeconfig (Merge).
type ExportOptions struct {
	Write string
	Force bool
	Merge bool
	// Name is the context name --merge gives it.
	Name string
}

// Export puts data where o says; out is stdout, and msg gets the one line
// saying what was written.
func Export(out, msg io.Writer, data []byte, o ExportOptions) error {
	switch {
	case o.Merge && o.Write != "":
		return errors.New("--merge and --write both name where the kubeconfig goes; pass one")
	case o.Merge:
		target, err := MergeTarget()
		if err != nil {
			return err
		}
		if err := MergeKubeconfig(target, data, o.Name); err != nil {
			return err
		}
		fmt.Fprintf(msg, "merged context %s into %s (mode 0600) and made it the current context\n", o.Name, target)
		return nil
	case o.Write != "":
		if err := WriteKubeconfig(o.Write, data, o.Force); err != nil {
			return err
		}
		fmt.Fprintf(msg, "wrote %s (mode 0600)\n", o.Write)
		return nil
	}
	_, err := out.Write(data)
	return err
}
