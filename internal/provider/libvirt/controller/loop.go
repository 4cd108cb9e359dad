package controller

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// loop runs one reconciler as controller-runtime's controllers do: a
// rate-limited work queue of requests, fed by informer events through map
// functions, drained by workers; an error or Requeue backs off, a
// RequeueAfter comes back then. It is here rather than
// controller-runtime's manager and controller packages because those
// register Prometheus collectors at init (a Go runtime collector among
// them), which every labctl command would pay at start: about 9 ms and
// 5 MiB, measured (docs/libvirt.md).
type loop struct {
	name    string
	r       reconcile.Reconciler
	q       workqueue.TypedRateLimitingInterface[reconcile.Request]
	workers int
	log     logr.Logger
}

func newLoop(name string, r reconcile.Reconciler, workers int, log logr.Logger) *loop {
	return &loop{
		name: name, r: r, workers: max(workers, 1), log: log.WithValues("controller", name),
		q: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
			workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name}),
	}
}

// mapFunc maps an object of an event to the requests it concerns.
type mapFunc func(context.Context, client.Object) []reconcile.Request

// self is the mapFunc of the reconciler's own kind.
func self(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
}

// watch enqueues, for every add, update and delete of obj's kind, what m
// maps the object to.
func (l *loop) watch(ctx context.Context, c cache.Cache, obj client.Object, m mapFunc) error {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("%s: watching %T: %w", l.name, obj, err)
	}
	enqueue := func(o any) {
		if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if co, ok := o.(client.Object); ok {
			for _, r := range m(ctx, co) {
				l.q.Add(r)
			}
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		return fmt.Errorf("%s: watching %T: %w", l.name, obj, err)
	}
	return nil
}

// run works the queue until ctx ends, then waits for the workers.
func (l *loop) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range l.workers {
		wg.Go(func() {
			for l.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	l.q.ShutDown()
	wg.Wait()
}

func (l *loop) next(ctx context.Context) bool {
	req, quit := l.q.Get()
	if quit {
		return false
	}
	defer l.q.Done(req)
	res, err := l.r.Reconcile(ctx, req)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		l.log.Error(err, "reconcile failed; retrying", "object", req.String())
		l.q.AddRateLimited(req)
	case res.RequeueAfter > 0:
		l.q.Forget(req)
		l.q.AddAfter(req, res.RequeueAfter)
	case res.Requeue: //nolint:staticcheck // still honoured, as controller-runtime does
		l.q.AddRateLimited(req)
	default:
		l.q.Forget(req)
	}
	return true
}
