# pmjail: `make run` sets up and runs an example job; `make test` sets up and
# runs the test suites. Both are safe to repeat.
GO      ?= go
# The version pmjail and the daemon report (`pmjail version`, /v1/health)
# and `make deb` packages (packaging/deb.sh turns it into a Debian
# version): the checkout's, exactly; outside a git checkout the go
# command's own record (internal/buildinfo), and "dev" for a package.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
BIN     := bin/pmjail
INIT    := bin/pmjail-init
SERVE   := bin/pmjail-serve
# No symbol table or DWARF: Go's stack traces use its own tables, and the
# smaller binary starts ~1 ms sooner — paid twice a run (supervisor and
# init stage).
LDFLAGS := -s -w
# gcc and libc6-dev: cgo (libseccomp) and the tests' C programs;
# strace: profiles/trace-syscalls.sh, which derives the seccomp policies;
# libfakeroot: a library only /etc/ld.so.conf.d's directories hold, which
# the root's library tests load through a jail; tzdata: the time zones
# Python runs read (the guide's zoneinfo example).
DEB     := gcc libc6-dev libseccomp-dev pkg-config strace libfakeroot tzdata
# bubblewrap is the bench's comparison only: pmjail warms its caches in
# its own jail, and neither `make run` nor `make test` needs it.
BENCH_DEB := bubblewrap time
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: setup deps build deb run test check test-host test-vm test-systemd bench bench-deps soak lint clean

setup: deps build
	$(BIN) prepare

# Debian packages, Go modules and the pinned runtimes (Deno, Pyodide) from
# the npm registry via package-lock.json.
deps:
	@$(call install_deb,$(DEB))
	$(GO) mod download
	@if [ ! -x node_modules/@deno/linux-x64-glibc/deno ] || ! cmp -s package-lock.json node_modules/.pmjail-lock; then \
		npm ci --no-audit --no-fund && cp package-lock.json node_modules/.pmjail-lock; fi

# Three binaries from one build, installed side by side: pmjail (the CLI),
# pmjail-serve (the daemon, which `pmjail serve` execs: built with the
# nodaemon tag, pmjail leaves the HTTP server, Prometheus and go-systemd
# out of its start-up) and pmjail-init (a job's init stage, pure Go and
# static: it starts in a quarter of pmjail's time). A pmjail built alone
# (`go install ./cmd/pmjail`) plays both roles itself, a little slower. Each records the Go build IDs of the ones it runs and
# uses them only when they match. pmjail and pmjail-serve link libseccomp
# and libc statically too: no dynamic loader on every start (the netgo and
# osusergo tags keep glibc's NSS, which a static binary cannot load, out).
STATIC  := -tags netgo,osusergo
INITID   = -X github.com/pmjail/pmjail/jail.initBuildID=$$($(GO) tool buildid $(INIT))
STAMP    = -X github.com/pmjail/pmjail/internal/buildinfo.stamp=$(VERSION)
build:
	CGO_ENABLED=0 $(GO) build -ldflags='$(LDFLAGS)' -o $(INIT) ./cmd/pmjail-init
	$(GO) build $(STATIC) -ldflags='$(LDFLAGS) -extldflags=-static $(STAMP) '"$(INITID)" -o $(SERVE) ./cmd/pmjail-serve
	$(GO) build $(STATIC),nodaemon -ldflags='$(LDFLAGS) -extldflags=-static $(STAMP) '"$(INITID)"' -X main.serveBuildID='"$$($(GO) tool buildid $(SERVE))" -o $(BIN) ./cmd/pmjail

run: setup
	$(BIN) run --json --cap log --input '{"name":"operator"}' examples/handler.ts

# The whole suite: the static checks, then every package's tests and the
# integration suite on this host, then the same containment checks in a
# cgroup v2 VM, then the daemon installed from its Debian package under a
# real systemd in that VM.
test: check test-host test-vm test-systemd

# The checks that need no VM, first: lint; go vet as built without cgo
# and for arm64 (the fallback start path and the seccomp layer's stand-in,
# which no other step compiles), and the tests of what a build without cgo
# reports; the Go client as a program of another platform builds it
# (without cgo, for macOS), importing no pmjail package but api; then the
# race detector on the packages whose tests pass as nobody without a skip,
# plus ipc (its one root test is cheap). The other packages start jails
# and would pay -race's slowdown in every run.
RACE_PKGS ?= ./api ./client ./cmd/pmjail ./internal/... ./ipc ./job ./packages ./posture ./profiles ./queue ./runtimes
check: deps
	$(MAKE) --no-print-directory lint
	CGO_ENABLED=0 $(GO) vet ./...
	GOARCH=arm64 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) test -count=1 -run NoCompiler ./seccomp ./posture
	CGO_ENABLED=0 $(GO) build ./client ./api
	GOOS=darwin GOARCH=arm64 $(GO) build ./client
	$(GO) test -count=1 -run DependsOnAPIAlone ./client
	$(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)

# The integration suite tests the binaries `make build` made (pmjail and
# its pmjail-init). HOST_SKIP names the tests whose set-up takes what
# this project's CI host does not grant its root (CAP_SYS_RESOURCE, to
# start pmjail at a negative oom_score_adj): the VM suite runs them.
HOST_SKIP ?= ^(TestTrust_GuestOOMProtectionNotInherited|TestTrust_GuestNiceLimitNotInherited)$$
test-host: setup
	PMJAIL_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 40m -skip '$(HOST_SKIP)' ./...

# The integration tests that run in the cgroup v2 VM: everything that
# touches cgroups, namespaces, seccomp and posture, and the containment
# tests (TestSecurity*, TestRootLibraries_*), and the trust-boundary tests
# whose answer depends on the kernel and the cgroup version (the guest's
# lifetime, leases, the policies' argument filters, per-user budgets,
# binds, Landlock's posture). The denial flood's CPU ratio stays on the
# host: under TCG the supervisor's fixed start-up costs outweigh any flood
# a test can afford; so do the small-frame flood's CPU bounds (its guest
# built its frames past its 500 ms CPU limit there). Under TCG Deno is ~20x
# slower and Pyodide far more, so Python and the long loops stay on the host.
# The VM has no C compiler and a static busybox for /bin: integration/
# cprograms is compiled here (PMJAIL_CPROGRAMS), and the host's dynamic
# /bin/ls and /bin/cat (-x) and /etc/ld.so.conf.d come along for the
# root's library tests, integration/testdata for the hostile scripts.
# suite.sh fails a suite in which fewer tests report a verdict than its
# test binary lists for these filters (-test.list), or none is listed.
VM_TESTS ?= Posture|DaemonPrestarted|RunCarries|MissingNetwork|NoCgroup|TestLimits_|TestCleanup_|TestSecurity|TestRootLibraries_|TestE2E_|Channel|TestTrust_Lifetime|TestTrust_Lease|TestTrust_SocketFamilies|TestTrust_PrctlOptions|TestTrust_InotifyFlood|TestTrust_ExecBind|TestTrust_PostureLandlock|TestTrust_GuestOOM|TestTrust_GuestNiceLimit
VM_SKIP  ?= Python|IPCFlood|ManySequential|SmallFramesCostTheGuest
# The jail package's runs and prestart pool (its children born in the
# cgroups they wait with, TestPoolChildWaitsWithItsCgroup) on a unified
# host; its other tests read the source tree or want a dynamically linked
# /bin/sh, which the VM has not. The init-stage start's tests (package
# jail/internal/spawn, on another kernel) all run there but the one that
# reads the child's machine code, which needs objdump. The daemon
# prestarts only with a core spare, so on the TCG VM's one vCPU
# DaemonPrestarted checks that it starts none and contains a cold run.
VM_JAIL_TESTS ?= TestRun|TestPool
VMBIN := $(CURDIR)/bin/vm

test-vm: setup
	mkdir -p $(VMBIN)
	$(GO) test -c -o $(VMBIN)/cgroup.test ./cgroup
	$(GO) test -c -o $(VMBIN)/jail.test ./jail
	$(GO) test -c -o $(VMBIN)/spawn.test ./jail/internal/spawn
	$(GO) test -c -o $(VMBIN)/integration.test ./integration
	CGO_ENABLED=0 $(GO) build -o $(VMBIN)/selftest ./integration/vm/selftest
	CGO_ENABLED=0 $(GO) build -o $(VMBIN)/prober ./integration/prober
	rm -rf $(VMBIN)/cprograms && $(GO) run ./integration/cprograms -out $(VMBIN)/cprograms
	cp $(BIN) $(INIT) $(SERVE) $(VMBIN)/
	integration/vm/run.sh -x /bin/ls -x /bin/cat -d $(VMBIN):$(VMBIN) -d $(CURDIR)/node_modules:$(CURDIR)/node_modules \
		-d /etc/ld.so.conf.d:/etc/ld.so.conf.d -d $(CURDIR)/integration/testdata:$(CURDIR)/integration/testdata \
		-e CI=true -e PMJAIL_BIN=$(VMBIN)/pmjail -e PMJAIL_PROBER=$(VMBIN)/prober -e PMJAIL_CPROGRAMS=$(VMBIN)/cprograms -e PMJAIL_RUNTIME_DIR=$(CURDIR)/node_modules \
		-e PMJAIL_REPO_ROOT=$(CURDIR) -e 'VM_TESTS=$(VM_TESTS)' -e 'VM_SKIP=$(VM_SKIP)' -e 'VM_JAIL_TESTS=$(VM_JAIL_TESTS)' \
		integration/vm/suite.sh $(VMBIN)

# A Debian package (bin/deb/pmjail_<version>_amd64.deb) with nfpm, pinned
# from the Go module proxy: this build's three binaries in /usr/bin, the
# pinned runtimes in /usr/lib/pmjail/node_modules, deploy/'s units, the
# example config, the docs and a pmjail group (packaging/).
deb: deps build
	GO='$(GO)' packaging/deb.sh '$(or $(VERSION),dev)'

# deploy/'s units under a real systemd (the host's, as PID 1 of the cgroup v2
# VM): unitcheck installs the package `make deb` built with dpkg, writes the
# config from its example, and checks socket activation, Type=notify,
# delegation, reload, the watchdog, stop and restart, then the package's
# removal and purge (integration/vm/unitcheck). Deno only: Pyodide is
# minutes a run under TCG.
test-systemd: setup deb
	mkdir -p $(VMBIN)
	$(GO) build -o $(VMBIN)/unitcheck ./integration/vm/unitcheck
	deb=$$(ls bin/deb/pmjail_*_amd64.deb) && \
	integration/vm/run.sh -s -p "$$deb" $(VMBIN)/unitcheck -deb "/packages/$${deb##*/}"

# install_deb installs the Debian packages of the list $(1) that are missing.
install_deb = missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi

# Side-by-side costs (bare Deno/Pyodide, bubblewrap, the daemon, seccomp)
# with a short soak; writes BENCHMARKS.md. FULL_SOAK=1 runs the full soak.
bench: build bench-deps
	$(GO) run ./bench $(if $(FULL_SOAK),-full-soak) $(BENCHFLAGS)

bench-deps:
	@$(call install_deb,$(BENCH_DEB))

# The long soak alone (2,000 native + 200 Deno runs, then leak checks),
# printed to stdout.
soak: build
	$(GO) run ./bench -only soak -full-soak -out - $(BENCHFLAGS)

# staticcheck comes pinned from the Go module proxy.
lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

clean:
	rm -rf bin
