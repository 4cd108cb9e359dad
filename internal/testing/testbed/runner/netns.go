package runner

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// sandbox is a network namespace of a process's own, as a pod's sandbox
// (its pause container) holds one: for a binary that binds a port on
// every interface with no flag to move it (Image.OwnNetwork: Kamaji's
// webhook server on 9443, which CAPMOX's also takes). A `sleep infinity`
// started by util-linux's `unshare --net` holds it; the process joins it
// (nsenter) and keeps it across restarts. Its loopback is its own, so the
// runner bridges the two loopbacks by copying connections, in the test
// process:
//
//   - into it: a port of the process (a probe's, a webhook Service's)
//     from a free port on the machine's loopback (expose);
//   - out of it: a port on the machine's loopback (the API server's, a
//     Service's, the datastore's) from the same port on its loopback
//     (reach).
//
// The sockets inside are made by a thread that joined the namespace
// (setns) for the call alone. Nothing on the machine changes: no
// interface, route or firewall rule.
type sandbox struct {
	holder *exec.Cmd
	ns     string // /proc/<pid>/ns/net

	mu        sync.Mutex
	reached   map[int]bool
	listeners []net.Listener
	closed    bool
}

// newSandbox starts the holder and brings its loopback up.
func newSandbox() (*sandbox, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("a network namespace of the process's own needs util-linux's unshare: %w", err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("a network namespace of the process's own needs root")
	}
	holder := exec.Command(unshare, "--net", "--", sleep, "infinity")
	if err := holder.Start(); err != nil {
		return nil, fmt.Errorf("starting the network namespace's holder: %w", err)
	}
	go func() { _ = holder.Wait() }()
	s := &sandbox{holder: holder, ns: "/proc/" + strconv.Itoa(holder.Process.Pid) + "/ns/net", reached: map[int]bool{}}
	// unshare makes the namespace, then execs sleep in it.
	mine, _ := os.Readlink("/proc/self/ns/net")
	deadline := time.Now().Add(10 * time.Second)
	for {
		theirs, err := os.Readlink(s.ns)
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(holder.Process.Pid) + "/comm")
		if err == nil && theirs != mine && string(comm) == "sleep\n" {
			break
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, fmt.Errorf("the network namespace's holder did not start: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.in(loopbackUp); err != nil {
		s.close()
		return nil, fmt.Errorf("bringing up the network namespace's loopback: %w", err)
	}
	return s, nil
}

// in runs f on a thread that has joined the namespace; sockets f makes
// belong to it.
func (s *sandbox) in(f func() error) error {
	runtime.LockOSThread()
	mine, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer mine.Close()
	theirs, err := os.Open(s.ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer theirs.Close()
	if err := setns(theirs); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("joining %s: %w", s.ns, err)
	}
	ferr := f()
	if err := setns(mine); err != nil {
		// The thread stays locked, and ends with the goroutine: it is
		// never handed to another one in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("leaving %s: %w", s.ns, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}

// loopbackUp sets IFF_UP on lo (SIOCSIFFLAGS), as `ip link set lo up`.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	req, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, req); err != nil {
		return err
	}
	req.SetUint16(req.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, req)
}

// expose copies connections to hostPort on the machine's loopback to
// port on the namespace's.
func (s *sandbox) expose(hostPort, port int) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(hostPort))
	if err != nil {
		return fmt.Errorf("exposing port %d of the network namespace: %w", port, err)
	}
	s.serve(l, func() (net.Conn, error) {
		var c net.Conn
		err := s.in(func() (err error) {
			c, err = net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
			return err
		})
		return c, err
	})
	return nil
}

// reach copies connections to port on the namespace's loopback to the
// same port on the machine's, once per port.
func (s *sandbox) reach(port int) error {
	s.mu.Lock()
	done := s.reached[port] || s.closed
	s.reached[port] = true
	s.mu.Unlock()
	if done {
		return nil
	}
	var l net.Listener
	err := s.in(func() (err error) {
		l, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		return err
	})
	if err != nil {
		s.mu.Lock()
		delete(s.reached, port)
		s.mu.Unlock()
		return fmt.Errorf("reaching port %d from the network namespace: %w", port, err)
	}
	s.serve(l, func() (net.Conn, error) {
		return net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
	})
	return nil
}

// serve accepts on l until close, copying each connection both ways to
// what dial opens.
func (s *sandbox) serve(l net.Listener, dial func() (net.Conn, error)) {
	s.mu.Lock()
	s.listeners = append(s.listeners, l)
	s.mu.Unlock()
	go Pipe(l, dial)
}

// Pipe accepts on l until it is closed, copying each connection both
// ways to what dial opens; a connection dial cannot serve is dropped.
func Pipe(l net.Listener, dial func() (net.Conn, error)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			d, err := dial()
			if err != nil {
				return
			}
			defer d.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(d, c); closeWrite(d); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, d); closeWrite(c); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// join wraps cmd so that it runs in the namespace (nsenter --net).
func (s *sandbox) join(cmd *exec.Cmd) (*exec.Cmd, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("joining a network namespace needs util-linux's nsenter: %w", err)
	}
	args := append([]string{nsenter, "--net=" + s.ns, "--"}, cmd.Args...)
	args[3] = cmd.Path
	return &exec.Cmd{Path: nsenter, Args: args, Dir: cmd.Dir, Env: cmd.Env}, nil
}

// close stops the copying and the holder; the namespace goes with it.
func (s *sandbox) close() {
	s.mu.Lock()
	s.closed = true
	ls := s.listeners
	s.listeners = nil
	s.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	if s.holder != nil && s.holder.Process != nil {
		_ = s.holder.Process.Kill()
	}
}
