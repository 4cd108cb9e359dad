package config

import "fmt"

// Autoscaled is the one rule for who owns a worker pool's count: the
// cluster-autoscaler, between min and max, when max > min; else the pool
// is a fixed min workers. lab.yaml's pools, the render and 'cluster
// scale' all follow it, so 'scale --min 3 --max 3' makes what min: 3,
// max: 3 in lab.yaml renders: a fixed pool of 3.
func Autoscaled(min, max int) bool { return max > min }

// BoundsProblem is one thing wrong with a pool's bounds: Field is "min"
// or "max", Msg says why and ends with the number given.
type BoundsProblem struct {
	Field, Msg string
}

// CheckBounds is the one rule for a pool's bounds, used by validation
// and by 'cluster scale': 0 <= min <= max and max >= 1 (the autoscaler
// must be able to add a worker). minName is how the caller's user names
// min, e.g. workers.min or --min.
func CheckBounds(min, max int, minName string) []BoundsProblem {
	var out []BoundsProblem
	if min < 0 {
		out = append(out, BoundsProblem{"min", fmt.Sprintf("must be 0 or more, got %d", min)})
	}
	if max < min {
		out = append(out, BoundsProblem{"max", fmt.Sprintf("must be >= %s (%d), got %d", minName, min, max)})
	} else if max < 1 {
		out = append(out, BoundsProblem{"max", fmt.Sprintf("must be at least 1 so the autoscaler can add a worker, got %d", max)})
	}
	return out
}
