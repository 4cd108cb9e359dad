package backup

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/go-logr/logr"
	clusterctl "sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	clusterctlconfig "sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	clusterctllog "sigs.k8s.io/cluster-api/cmd/clusterctl/log"

	"github.com/labctl/labctl/internal/kube"
)

// mover is clusterctl's own move, to a folder and from one: the code
// `clusterctl move --to-directory` and `--from-directory` run. It finds a
// cluster's objects by their owner references and CRD labels
// (clusterctl.cluster.x-k8s.io, which the operator's component processing
// puts on every provider CRD, and /move-hierarchy, which in-cluster IPAM's
// pools carry), and recreates them in owner order with the new UIDs.
//
// It uses clusterctl's cluster client (client/cluster), where the object
// mover lives, not the top-level client (client): that one also links
// alpha, tree, convert and their schemes, whose package-level vars every
// labctl command would build at start-up (make bench measures it), and
// its Move only adds the two checks connect makes here.
type mover struct {
	cfg clusterctlconfig.Client
}

func newMover(ctx context.Context) (*mover, error) {
	// An empty in-memory configuration: clusterctl's default reads and
	// creates files under ~/.config/cluster-api, which a move does not need.
	cfg, err := clusterctlconfig.New(ctx, "", clusterctlconfig.InjectReader(clusterctlconfig.NewMemoryReader()))
	if err != nil {
		return nil, fmt.Errorf("setting up clusterctl: %w", err)
	}
	return &mover{cfg: cfg}, nil
}

// connect is clusterctl's client for the cluster kc reaches, checked as
// clusterctl's Move checks it (client/move.go getClusterClient): the
// cluster speaks the current Cluster API contract, and clusterctl's own
// inventory CRD is in place.
func (m *mover) connect(ctx context.Context, kc *kube.Client) (clusterctl.Client, error) {
	k, err := kubeconfigOf(kc)
	if err != nil {
		return nil, err
	}
	c := clusterctl.New(k, m.cfg)
	if err := c.ProviderInventory().CheckCAPIContract(ctx); err != nil {
		return nil, err
	}
	if err := c.ProviderInventory().EnsureCustomResourceDefinitions(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// kubeconfigOf is how clusterctl reaches the cluster kc reaches: the same
// file and context. clusterctl takes one file, not a list.
func kubeconfigOf(kc *kube.Client) (clusterctl.Kubeconfig, error) {
	if len(filepath.SplitList(kc.Kubeconfig)) != 1 {
		return clusterctl.Kubeconfig{}, fmt.Errorf("the management cluster's kubeconfig is a list of files (%s); clusterctl reads one: name one file with --kubeconfig", kc.Kubeconfig)
	}
	return clusterctl.Kubeconfig{Path: kc.Kubeconfig, Context: kc.Context}, nil
}

// toDirectory saves namespace's Cluster API objects into dir. clusterctl
// pauses the namespace's Clusters while it reads them and unpauses them
// after; the caller makes sure they are unpaused when it fails half way.
func (m *mover) toDirectory(ctx context.Context, src *kube.Client, namespace, dir string, progress func(string)) error {
	defer useLog(progress, nil)()
	from, err := m.connect(ctx, src)
	if err != nil {
		return err
	}
	return from.ObjectMover().ToDirectory(ctx, namespace, dir)
}

// fromDirectory creates the objects saved in dir on dst, owners first, and
// unpauses the Clusters among them. An object that already exists is left
// as it is (clusterctl's restoreTargetObject), so a second run resumes.
func (m *mover) fromDirectory(ctx context.Context, dst *kube.Client, dir string, progress func(string)) error {
	defer useLog(progress, nil)()
	to, err := m.connect(ctx, dst)
	if err != nil {
		return err
	}
	return to.ObjectMover().FromDirectory(ctx, to, dir)
}

// plan lists the objects a move of namespace would take, as
// `clusterctl move --dry-run` finds them: nothing is paused or written.
func (m *mover) plan(ctx context.Context, src *kube.Client, namespace string) ([]string, error) {
	var objs []string
	restore := useLog(nil, func(msg string, kv []any) {
		// mover.go createTargetObject: V(1).Info("Creating", kind, name,
		// "Namespace", namespace), the line --dry-run prints per object.
		if msg == "Creating" && len(kv) >= 2 {
			objs = append(objs, fmt.Sprintf("%v %v/%v", kv[0], namespace, kv[1]))
		}
	})
	defer restore()
	from, err := m.connect(ctx, src)
	if err != nil {
		return nil, err
	}
	err = from.ObjectMover().Move(ctx, namespace, nil, true)
	return objs, err
}

// logMu keeps one operation at a time on clusterctl's logger, a global.
var logMu sync.Mutex

// useLog points clusterctl's logger at progress (its level-0 messages,
// which name steps, never object contents) and detail (level 1, one line
// per object), and returns the function that puts the silent one back.
func useLog(progress func(string), detail func(msg string, kv []any)) func() {
	logMu.Lock()
	prev := clusterctllog.Log
	clusterctllog.SetLogger(logr.New(&logSink{progress: progress, detail: detail}))
	return func() {
		clusterctllog.SetLogger(prev)
		logMu.Unlock()
	}
}

type logSink struct {
	progress func(string)
	detail   func(string, []any)
	values   []any
}

func (s *logSink) Init(logr.RuntimeInfo) {}

func (s *logSink) Enabled(level int) bool {
	return (level == 0 && s.progress != nil) || (level == 1 && s.detail != nil)
}

func (s *logSink) Info(level int, msg string, kv ...any) {
	switch {
	case level == 0 && s.progress != nil:
		s.progress("clusterctl: " + msg)
	case level == 1 && s.detail != nil:
		s.detail(msg, kv)
	}
}

// Error messages come back as errors from Move as well; printing them
// here would say them twice.
func (s *logSink) Error(error, string, ...any) {}

func (s *logSink) WithValues(kv ...any) logr.LogSink {
	return &logSink{progress: s.progress, detail: s.detail, values: append(append([]any{}, s.values...), kv...)}
}

func (s *logSink) WithName(string) logr.LogSink { return s }
