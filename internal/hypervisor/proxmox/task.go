package proxmox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	pve "github.com/luthermonson/go-proxmox"
)

// TaskError is a PVE task that ended with an error. Log holds the last
// lines of its task log.
type TaskError struct {
	UPID, Node, Type, ID string
	ExitStatus           string
	Log                  []string
}

func (e *TaskError) Error() string {
	msg := fmt.Sprintf("task %s %s on node %s failed: %s", e.Type, e.ID, e.Node, e.ExitStatus)
	if len(e.Log) > 0 {
		msg += "\n  task log (last lines):\n    " + strings.Join(e.Log, "\n    ")
	}
	return msg
}

const logTail = 10

// wait polls the task on the node its UPID names, backing off from
// o.Backoff to o.MaxBackoff, until it stops. "OK" and "WARNINGS: n" are
// success; any other exit status is a *TaskError with the log's tail.
func (d *Driver) wait(ctx context.Context, upid string) error {
	t := pve.NewTask(pve.UPID(upid), d.c)
	if t == nil || t.Node == "" {
		return fmt.Errorf("PVE answered %q where a task id (UPID) was expected", upid)
	}
	delay := d.o.Backoff / 5
	if delay <= 0 {
		delay = time.Millisecond
	}
	for {
		if err := t.Ping(ctx); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("waiting for task %s on %s: %w", t.Type, t.Node, ctx.Err())
			}
			return fmt.Errorf("reading the status of task %s on %s: %w", t.Type, t.Node, err)
		}
		if t.IsCompleted {
			if t.IsSuccessful {
				return nil
			}
			te := &TaskError{UPID: upid, Node: t.Node, Type: t.Type, ID: t.ID, ExitStatus: t.ExitStatus}
			if l, err := t.Log(ctx, 0, 500); err == nil {
				keys := slices.Sorted(maps.Keys(l))
				for _, k := range keys {
					te.Log = append(te.Log, l[k])
				}
				if len(te.Log) > logTail {
					te.Log = te.Log[len(te.Log)-logTail:]
				}
			}
			return te
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("waiting for task %s on %s: %w", t.Type, t.Node, ctx.Err())
		case <-timer.C:
		}
		delay = min(delay*2, d.o.MaxBackoff)
	}
}

// isTaskError reports whether err is a failed task whose status matches pattern.
func isTaskError(err error, substr string) bool {
	var te *TaskError
	return errors.As(err, &te) && strings.Contains(te.ExitStatus, substr)
}
