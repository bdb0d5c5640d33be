// Package cleanup unwinds a partial set-up: each step that acquires
// something adds how to give it back, and on any early return the
// acquisitions are given back in reverse, unless the set-up succeeded and
// released them to their new owner. After gVisor's pkg/cleanup.
//
//	cu := cleanup.Make(func() { lease.release() })
//	defer cu.Clean()
//	... more steps, each cu.Add(undo) ...
//	cu.Release() // success: the caller owns what was acquired
package cleanup

// Cleanup holds the undo steps of a set-up under way. The zero value is
// ready to use.
type Cleanup struct {
	steps []func()
}

// Make returns a Cleanup whose first undo step is f (nil: none).
func Make(f func()) Cleanup {
	var c Cleanup
	c.Add(f)
	return c
}

// Add adds f to be run by Clean, before the steps added earlier.
func (c *Cleanup) Add(f func()) {
	if f != nil {
		c.steps = append(c.steps, f)
	}
}

// Clean runs the undo steps, last added first, and forgets them: a second
// Clean, or a Clean after Release, does nothing.
func (c *Cleanup) Clean() {
	steps := c.steps
	c.steps = nil
	for i := len(steps) - 1; i >= 0; i-- {
		steps[i]()
	}
}

// Release forgets the undo steps without running them, and returns one
// function that runs them (last added first), for the new owner of what
// was acquired to call when it is done with it.
func (c *Cleanup) Release() func() {
	steps := c.steps
	c.steps = nil
	return func() {
		for i := len(steps) - 1; i >= 0; i-- {
			steps[i]()
		}
	}
}
