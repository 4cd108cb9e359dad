package runner

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The kubelet server, asked as the API server asks it (SPDY, no
// certificate checked), forwards a StatefulSet Pod's port to where the
// runner moved its process, and nothing else: not a port of the shared
// loopback the Pod does not declare, not a Pod it does not run (nor a
// Deployment's process, which stands for no Pod), not another UID.
func TestKubeletServerForwardsThePodsPorts(t *testing.T) {
	r := &Runner{t: t, procs: map[string]*Proc{}}
	t.Cleanup(func() {
		for _, release := range r.portLocks {
			release()
		}
	})
	k, err := r.serveKubelet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.close)

	etcd := serve(t, "etcd")
	stranger := serve(t, "stranger")
	pod := &Proc{podUID: "uid-0", Ports: map[int32]int{2379: etcd},
		container: corev1.Container{Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: 2379}}}}
	pod.Pod = []*Proc{pod}
	dep := &Proc{Ports: map[int32]int{2379: etcd}}
	dep.Pod = []*Proc{dep}
	r.procs["kamaji-system/kamaji-etcd-0"] = pod
	r.procs["kamaji-system/a-deployment"] = dep

	cfg := &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(k.port), TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	at := func(path string) *url.URL {
		return &url.URL{Scheme: "https", Host: cfg.Host[len("https://"):], Path: path}
	}

	local, err := Forward(t, cfg, at("/portForward/kamaji-system/kamaji-etcd-0"), 2379)
	if err != nil {
		t.Fatal(err)
	}
	if got := through(t, local); got != "etcd" {
		t.Errorf("through the forward of port 2379: %q, want the pod's process answering", got)
	}
	local, err = Forward(t, cfg, at("/portForward/kamaji-system/kamaji-etcd-0/uid-0"), stranger)
	if err != nil {
		t.Fatal(err)
	}
	if got := through(t, local); got != "" {
		t.Errorf("port %d, which the Pod does not declare, reached %q", stranger, got)
	}

	for path, want := range map[string]string{
		"/portForward/kamaji-system/kamaji-etcd-1":       "pod does not exist",
		"/portForward/kamaji-system/a-deployment":        "pod does not exist",
		"/portForward/kamaji-system/kamaji-etcd-0/uid-1": "pod not found",
	} {
		if _, err := Forward(t, cfg, at(path), 2379); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

// serve runs echo (its name, then the connection closes) on a loopback
// port it returns.
func serve(t *testing.T, name string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go echo(ln, name)
	return ln.Addr().(*net.TCPAddr).Port
}

// through reads what comes through the local port until the connection
// ends, "" when nothing does.
func through(t *testing.T, port int) string {
	t.Helper()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	return strings.TrimSpace(string(got))
}

// The Node's status is posted again as kubelet posts it: when what the
// runner reports changed, or when the last heartbeat is
// nodeStatusReportFrequency old; not on every lease renewal.
func TestNodeStatusDue(t *testing.T) {
	now := time.Now()
	posted := func(change func(*corev1.NodeStatus)) *corev1.Node {
		n := &corev1.Node{Status: nodeStatus(10250, now.Add(-time.Minute))}
		change(&n.Status)
		return n
	}
	for _, c := range []struct {
		why  string
		node *corev1.Node
		port int
		due  bool
	}{
		{"unchanged, posted a minute ago", posted(func(*corev1.NodeStatus) {}), 10250, false},
		{"the kubelet server moved", posted(func(*corev1.NodeStatus) {}), 10251, true},
		{"marked not Ready", posted(func(s *corev1.NodeStatus) { s.Conditions[0].Status = corev1.ConditionUnknown }), 10250, true},
		{"the heartbeat is old", posted(func(s *corev1.NodeStatus) {
			s.Conditions[0].LastHeartbeatTime = metav1.NewTime(now.Add(-nodeStatusReportFrequency))
		}), 10250, true},
		{"no address", posted(func(s *corev1.NodeStatus) { s.Addresses = nil }), 10250, true},
		{"no Ready condition", posted(func(s *corev1.NodeStatus) { s.Conditions = nil }), 10250, true},
	} {
		if got := nodeStatusDue(c.node, c.port, now); got != c.due {
			t.Errorf("%s: due %v, want %v", c.why, got, c.due)
		}
	}
}
