package job

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
)

// managed is the jail's source of cgroups over a cgroup manager.
type managed struct{ m *cgroup.Manager }

// NewCgroups returns m as the jail's source of job cgroups (jail.Job.Cgroups,
// jail.PoolOptions.Cgroups), nil for a nil m.
func NewCgroups(m *cgroup.Manager) jail.Cgroups {
	if m == nil {
		return nil
	}
	return managed{m}
}

func (c managed) Make(id string, res *specs.LinuxResources) (jail.Cgroup, error) {
	j, err := c.m.Create(id, res)
	if err != nil {
		return nil, err
	}
	return j, nil
}

func (c managed) Reserve(id string) (jail.Cgroup, error) {
	j, err := c.m.Reserve(id)
	if err != nil {
		return nil, err
	}
	return j, nil
}

// AtBirth: on cgroup v2 a child is born in its cgroup (CLONE_INTO_CGROUP).
func (c managed) AtBirth() bool { return c.m.Host().Mode == cgroup.V2 }
