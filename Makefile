# pmjail: `make run` sets up and runs an example job; `make test` sets up and
# runs the test suites. Both are safe to repeat.
GO      ?= go
BIN     := bin/pmjail
DEB     := libseccomp-dev pkg-config bubblewrap strace
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: setup deps build run test test-vm bench lint clean

setup: deps build

# Debian packages, Go modules and the pinned runtimes (Deno, Pyodide) from
# the npm registry via package-lock.json.
deps:
	@missing=$$(for p in $(DEB); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi
	$(GO) mod download
	@if [ ! -x node_modules/@deno/linux-x64-glibc/deno ] || ! cmp -s package-lock.json node_modules/.pmjail-lock; then \
		npm ci --no-audit --no-fund && cp package-lock.json node_modules/.pmjail-lock; fi

build:
	$(GO) build -o $(BIN) ./cmd/pmjail

run: setup
	$(BIN) run --json --cap log --input '{"name":"operator"}' examples/handler.ts

test: setup
	$(GO) test -count=1 -timeout 30m ./...

lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet ./...
	staticcheck ./...

clean:
	rm -rf bin
