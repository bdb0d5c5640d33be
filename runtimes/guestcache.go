package runtimes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sync"
)

// The guest cache is a DENO_DIR in which `deno cache` analysed pmjail's
// JavaScript bootstrap at its in-jail paths. With an empty DENO_DIR every
// run parses bootstrap.js and channel.js again before the job's first line
// (measured: user code starts ~5.7 ms after Deno's time origin, ~2.4 ms with
// the analysis cached; a bare one-file script starts at ~2 ms). Each run
// gets its own copy, as with the Pyodide cache.

// guestCacheArgs warms the cache: module analysis only, no code runs.
var guestCacheArgs = []string{DenoTarget, "cache", "--no-config", "--no-lock", "--no-remote", "--no-npm", GuestDir + "/bootstrap.js", GuestDir + "/worker.js"}

// guestCacheKey names what the guest cache depends on: Deno and the guest
// files' content (Deno keys the analysis by URL and source). A daemon asks
// at every JavaScript run; neither its Deno nor the built-in guest files
// change under it (a replaced Deno is taken up at restart, as the init
// stage binary is), so the key is worked out once per Deno binary.
func (in *Install) guestCacheKey() (string, error) {
	if key, ok := guestCacheKeys.Load(in.DenoPath); ok {
		return key.(string), nil
	}
	dv, err := packageVersion(filepath.Join(filepath.Dir(in.DenoPath), "package.json"))
	if err != nil {
		return "", err
	}
	files, err := guestFiles()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "deno %s\nargs %q\n", dv, guestCacheArgs)
	for _, f := range files {
		fmt.Fprintf(h, "%s %x\n", f.Path, sha256.Sum256(f.Data))
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	guestCacheKeys.Store(in.DenoPath, key)
	return key, nil
}

// guestCacheKeys holds guestCacheKey's result by Deno binary.
var guestCacheKeys sync.Map

func (in *Install) guestCacheDir(key string) string {
	return filepath.Join(in.StateDir, guestCachePrefix+key)
}

const guestCachePrefix = "deno-guest-cache-"

// GuestCache returns the warm cache for JavaScript and TypeScript runs, or
// an error wrapping ErrNoDenoCache. It never builds one.
func (in *Install) GuestCache() (*DenoCache, error) {
	key, err := in.guestCacheKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDenoCache, err)
	}
	return publishedCache(in.guestCacheDir(key))
}

// EnsureGuestCache returns the guest cache, building it first when it is
// missing (see warmInJail).
func (in *Install) EnsureGuestCache(ctx context.Context) (*DenoCache, error) {
	if c, err := in.GuestCache(); err == nil {
		return c, nil
	}
	key, err := in.guestCacheKey()
	if err != nil {
		return nil, fmt.Errorf("build deno guest cache: %w", err)
	}
	files, err := guestFiles()
	if err != nil {
		return nil, err
	}
	if err := in.warmInJail(ctx, in.guestCacheDir(key), files, nil, guestCacheArgs); err != nil {
		return nil, fmt.Errorf("build deno guest cache: %w", err)
	}
	return in.GuestCache()
}
