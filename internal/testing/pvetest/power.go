package pvetest

import "sync"

// PowerChange is what happened to a VM's power: what a guest inside it
// would live through.
type PowerChange string

const (
	// PowerOn: a start (or create with start=1) task finished; the guest
	// boots from the VM's config, its cloud-init drive included.
	PowerOn PowerChange = "on"
	// PowerOff: a stop task finished on a running VM; the guest is gone
	// without a shutdown (qm stop is a hard stop).
	PowerOff PowerChange = "off"
	// Destroyed: a destroy task finished; the VM and its disks are gone.
	Destroyed PowerChange = "destroyed"
)

// PowerEvent is one power change of a VM, with a copy of the VM as it was
// when the task finished.
type PowerEvent struct {
	Change PowerChange
	VM     VM
}

// OnPower calls f for every power change of a VM, in order, on a goroutine
// of its own: the change happens when its task finishes (inside the
// server's lock), and f may call the server's accessors (Volume, VMs).
// It is how a VM-boot stand-in learns that a guest starts or goes away.
// One f per server; the calls end when the test does.
func (s *Server) OnPower(f func(PowerEvent)) {
	q := &powerQueue{kick: make(chan struct{}, 1), done: make(chan struct{}), f: f}
	s.mu.Lock()
	if s.power != nil {
		s.mu.Unlock()
		s.t.Fatalf("pvetest: OnPower called twice")
	}
	s.power = q
	s.mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		q.run()
	}()
	s.t.Cleanup(func() {
		close(q.done)
		<-stopped
	})
}

// powerQueue hands power events to the hook in order without blocking the
// task that made them.
type powerQueue struct {
	mu     sync.Mutex
	events []PowerEvent
	kick   chan struct{}
	done   chan struct{}
	f      func(PowerEvent)
}

// emitPower queues a power change of v. Callers hold s.mu.
func (s *Server) emitPower(change PowerChange, v *VM) {
	if s.power == nil {
		return
	}
	c := *v
	c.Config = make(map[string]string, len(v.Config))
	for k, x := range v.Config {
		c.Config[k] = x
	}
	c.Files = nil
	q := s.power
	q.mu.Lock()
	q.events = append(q.events, PowerEvent{Change: change, VM: c})
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func (q *powerQueue) run() {
	for {
		select {
		case <-q.done:
			return
		case <-q.kick:
		}
		q.mu.Lock()
		evs := q.events
		q.events = nil
		q.mu.Unlock()
		for _, ev := range evs {
			q.f(ev)
		}
	}
}
