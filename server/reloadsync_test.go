package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
)

// TestSyncQueuedRunMeetsTheReloadedCeiling is TestAsyncQueuedRunMeets-
// TheReloadedCeiling for a run that waits for its slot with its
// connection open: a reload applies to the runs that start after it,
// and such a run starts after it. It ran under the ceiling it was
// resolved against, and for the tenant it was admitted for: a limit
// lowered, or a tenant (its secrets, its origins) taken away because it
// abused them, still applied to each of its runs already queued, for up
// to queue_timeout (and a NATS job's, waiting on its rate, for longer).
// It must be refused as it gets its slot: 400 naming the field, or 403
// for a tenant the reload took away.
func TestSyncQueuedRunMeetsTheReloadedCeiling(t *testing.T) {
	sock, store := asyncDirs(t)
	cfgJSON := `{"version": 1, "max_concurrency": 1, "max_queue": 4, "others_max_queue": 4, "ceiling": {"limits": {"memory": %q}}, "runs": {"dir": %q}}`
	ts := startServerAt(t, fmt.Sprintf(cfgJSON, "512M", store), sock)
	ctx := context.Background()
	m, err := api.ParseSize("384M")
	if err != nil {
		t.Fatal(err)
	}
	reload := func(cfgJSON string) {
		t.Helper()
		cfg, err := ParseConfig(strings.NewReader(cfgJSON))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Socket.Path = sock
		if err := ts.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		cfg    string
		status int
		code   string
		field  string
		says   string
	}{
		{"the memory ceiling lowered below its limit", fmt.Sprintf(cfgJSON, "256M", store),
			http.StatusBadRequest, "invalid_job", "limits.memory", "limits.memory: 384M is above the ceiling of 256M"},
		// Others, refused once a tenant is configured.
		{"its tenant taken away", fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "runs": {"dir": %q}, "tenants": [{"name": "other", "match": {"uid": 4242}}]}`, store),
			http.StatusForbidden, "forbidden", "", "tenant (others) away"},
	} {
		blocker := takeTheSlot(ctx, t, ts)
		others := ts.state.Load().others
		type answer struct {
			res *api.Result
			err error
		}
		got := make(chan answer, 1)
		go func() {
			res, err := ts.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log("ran")`, Limits: api.Limits{Memory: m}})
			got <- answer{res, err}
		}()
		waitFor(t, func() bool { _, q, _, _ := others.share.lim.stats(); return q == 1 })
		reload(tc.cfg)
		if _, err := ts.c.CancelRun(ctx, blocker.ID); err != nil {
			t.Fatal(err)
		}
		a := <-got
		if ce, ok := errors.AsType[*client.Error](a.err); !ok || ce.StatusCode != tc.status || ce.Code != tc.code || ce.Field != tc.field || !strings.Contains(ce.Message, tc.says) {
			stdout := ""
			if a.res != nil {
				stdout = a.res.Stdout
			}
			t.Errorf("%s, with a sync run queued before it: %v (stdout %q), want %d %s naming %q, saying %q", tc.name, a.err, stdout, tc.status, tc.code, tc.field, tc.says)
		}
		// The next config: this one's, back.
		reload(fmt.Sprintf(cfgJSON, "512M", store))
	}
}
