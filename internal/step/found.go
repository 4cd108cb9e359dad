package step

import (
	"context"
	"sync"
)

// Found is a lazy getter on a run's context, as kind's ActionContext
// caches the cluster's nodes: steps ask it for something (a VM, a
// kubeconfig) instead of reading a field an earlier step happened to
// fill, so a step works the same whatever ran before it, in a dry run
// too. It remembers the thing once it exists; while it does not, every
// Get looks again.
type Found[T any] struct {
	mu sync.Mutex
	v  T
	ok bool
}

// Get returns the remembered value, or calls look and remembers what it
// finds. found is false while the thing does not exist.
func (f *Found[T]) Get(ctx context.Context, look func(context.Context) (v T, found bool, err error)) (v T, found bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ok {
		return f.v, true, nil
	}
	if v, found, err = look(ctx); err != nil || !found {
		var zero T
		return zero, false, err
	}
	f.v, f.ok = v, true
	return v, true, nil
}

// Set remembers v: a step that made the thing says so.
func (f *Found[T]) Set(v T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v, f.ok = v, true
}
