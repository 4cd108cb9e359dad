package runner

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/labctl/labctl/internal/testing/testbed"
)

// A sandbox's loopback is its own (a port taken on the machine's is free
// in it), and the runner's copying bridges the two: a port of the
// namespace exposed on the machine's loopback, a machine's port reached
// from the namespace, and a process joined to it sees only its side.
func TestSandboxBridgesLoopbacks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a network namespace of its own needs root")
	}
	s, err := newSandbox()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()

	// The machine's side: a server on a port; the same port is free inside.
	outside, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer outside.Close()
	go echo(outside, "outside")
	port := outside.Addr().(*net.TCPAddr).Port
	var inside net.Listener
	if err := s.in(func() (err error) { inside, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); return err }); err != nil {
		t.Fatalf("port %d, taken on the machine's loopback, is taken in the namespace too: %v", port, err)
	}
	go echo(inside, "inside")

	// Into the namespace: a free machine port copies to the inside server.
	hostPort, release, err := testbed.ReservePort()
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := s.expose(hostPort, port); err != nil {
		t.Fatal(err)
	}
	if got := ask(t, "127.0.0.1:"+strconv.Itoa(hostPort), nil); got != "inside" {
		t.Errorf("the exposed port answered %q, want the namespace's server", got)
	}

	// Out of it: a machine port reached from the namespace (the inside
	// server is closed first: the reach takes its port).
	inside.Close()
	if err := s.reach(port); err != nil {
		t.Fatal(err)
	}
	if got := ask(t, "127.0.0.1:"+strconv.Itoa(port), s); got != "outside" {
		t.Errorf("the reached port answered %q, want the machine's server", got)
	}

	// A process joined to the namespace dials its loopback.
	nc, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	cmd, err := s.join(exec.Command(nc, "-c", "cat /proc/self/net/tcp | wc -l"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if n < 2 || n > 4 {
		t.Errorf("the joined process sees %d lines of TCP sockets, want the namespace's own (the reach listener and little else)", n)
	}
}

func echo(l net.Listener, name string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte(name + "\n"))
		c.Close()
	}
}

// ask reads one line from addr, dialled in the sandbox when s is set.
func ask(t *testing.T, addr string, s *sandbox) string {
	t.Helper()
	var c net.Conn
	dial := func() (err error) { c, err = net.Dial("tcp", addr); return err }
	var err error
	if s != nil {
		err = s.in(dial)
	} else {
		err = dial()
	}
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading from %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}

// A process of an Image.OwnNetwork image binds its hard-coded port in its
// own network namespace: the machine's port stays free (CAPMOX can take
// it), and the runner reaches the process on the free port it maps the
// container port to; the process reaches the API server's port on its
// own loopback.
func TestOwnNetworkKeepsFixedPortsApart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a network namespace of its own needs root")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("the process stand-in is python3's http.server:", err)
	}
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	go echo(api, "api")
	apiPort := api.Addr().(*net.TCPAddr).Port
	r := &Runner{t: t, dir: t.TempDir(), cfg: &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(apiPort)}}
	const fixed = 19443
	p := &Proc{Deployment: "ns/fixed", Image: Image{Binary: "python3", FixedPorts: []int{fixed}, OwnNetwork: true}, Ports: map[int32]int{},
		Log: filepath.Join(r.dir, "p.log")}
	p.cmd = exec.Command(py, "-c", `
import http.server, socket, sys
s = socket.create_connection(("127.0.0.1", `+strconv.Itoa(apiPort)+`)); sys.stdout.write(s.makefile().readline()); sys.stdout.flush()
http.server.HTTPServer(("0.0.0.0", `+strconv.Itoa(fixed)+`), http.server.SimpleHTTPRequestHandler).serve_forever()`)
	defer func() {
		for _, unlock := range r.portLocks {
			unlock()
		}
	}()
	if err := r.sandboxed(p); err != nil {
		t.Fatal(err)
	}
	defer p.sandbox.close()
	if err := r.launch(p); err != nil {
		t.Fatal(err)
	}
	defer r.kill(p)
	local := p.Ports[fixed]
	if local == 0 || local == fixed {
		t.Fatalf("port %d maps to %d, want a free port of the machine's loopback", fixed, local)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(local) + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) || !p.Running() {
			log, _ := os.ReadFile(p.Log)
			t.Fatalf("the process's port %d through %d: %v\n%s", fixed, local, err, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	l, err := net.Listen("tcp", ":"+strconv.Itoa(fixed))
	if err != nil {
		t.Fatalf("port %d of the machine is taken although the process bound it in its own namespace: %v", fixed, err)
	}
	l.Close()
	if log, _ := os.ReadFile(p.Log); !strings.Contains(string(log), "api\n") {
		t.Errorf("the process did not reach the API server's port from its namespace; its log:\n%s", log)
	}
}
