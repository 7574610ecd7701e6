# Every developer command. `make help` lists them.
SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN := bin/cyrnel

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# $(INSTALL) PKG…: installs Debian packages with apt-get, as root. It fails
# the recipe when it cannot (not root, no apt-get) or when apt-get fails,
# showing apt-get's output: a missing part is never turned into a skip.
INSTALL = $(SHELL) -c '\
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
		echo "missing: $$* (make installs it with apt-get as root on Debian; install it yourself here)"; exit 1; fi; \
	echo "installing $$*"; mkdir -p .cache; \
	if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$$@"; } >.cache/apt.log 2>&1; then \
		cat .cache/apt.log; echo "apt-get install $$* failed"; exit 1; fi' install

.PHONY: deps
deps: ## check for (and on Debian, install) what builds and tests need: Go, Python 3, a C compiler for -race, pip as a wheel (declared packages are resolved with it)
	@command -v $(GO) >/dev/null || { echo "Go is required: https://go.dev/dl/"; exit 1; }
	@command -v $(PYTHON) >/dev/null || { echo "Python 3 is required"; exit 1; }
	@command -v "$$($(GO) env CC)" >/dev/null || $(INSTALL) gcc libc6-dev
	@ls /usr/share/python-wheels/pip-*.whl >/dev/null 2>&1 || $(INSTALL) python3-pip-whl
	@$(GO) mod download

.PHONY: build
build: ## build bin/cyrnel and its sandbox helper bin/cyrnel-sandbox (ship them side by side)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/cyrnel ./cmd/cyrnel-sandbox

.PHONY: run
run: build ## run the server on its embedded defaults (SQLite in ./cyrnel-data, 127.0.0.1:9371)
	./$(BIN) serve

.PHONY: test
test: deps lint ts-check openapi-lint mcp-conformance dredd py-check test-db browser datascience prometheus ## run every test CI runs: lint (gofmt, goimports, vet, staticcheck, the import rules), the TypeScript clients (generated, type-checked, and driven against the server), the OpenAPI documents' lint (Redocly) and Dredd, the Python runtime's type check, the whole suite with the race detector on SQLite and PostgreSQL (the console in Chromium; the metrics scraped by Prometheus), listing every skipped test and failing on one whose reason is not in tests/skips.allow, then each fuzz target briefly
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) build -o .cache/bin/skipcheck ./tests/skipcheck
	set -o pipefail; CYRNEL_TEST_POSTGRES_URL="$${CYRNEL_TEST_POSTGRES_URL:-$$(cat .cache/postgres-url)}" \
		$(GO) test -json -race -count=1 -timeout 20m ./... | .cache/bin/skipcheck -allow tests/skips.allow
	set -o pipefail; $(GO) test -json -count=1 -run '$(NORACE_TESTS)' ./envs/typescript | .cache/bin/skipcheck -allow /dev/null
	@$(MAKE) --no-print-directory fuzz

# Tests whose subject the race detector changes (its shadow memory is outside
# what GOMEMLIMIT counts): they skip under -race, so make test runs them once
# more without it, where no skip is allowed.
NORACE_TESTS := ^TestHeapNearTheLimitIsCollected$$

# Each fuzz target (a func Fuzz… in a _test.go file) runs FUZZTIME inputs; the
# corpus under testdata/fuzz is replayed by the ordinary tests as well. The
# budget is a count, not a duration: Go 1.26's coordinator can report a bare
# "context deadline exceeded" failure when a duration ends while a worker is
# mid-input (golang/go#75804, fixed in Go 1.27); a count has no deadline.
FUZZTIME ?= 20000x
.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 20000 inputs) each
	@mkdir -p .cache
	@grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(' . | sort | while read -r f; do \
		for fn in $$(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$$f" | cut -d' ' -f2); do \
			echo "fuzz $$(dirname $$f) $$fn ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) "./$$(dirname $$f)" >.cache/fuzz.log 2>&1 || { cat .cache/fuzz.log; exit 1; }; \
		done; done

# golangci-lint, pinned; installed into .cache/bin from the Go module proxy.
GOLANGCI_VERSION := v2.15.0
GOLANGCI := .cache/bin/golangci-lint-$(GOLANGCI_VERSION)
$(GOLANGCI):
	@mkdir -p .cache/bin
	@echo "installing golangci-lint $(GOLANGCI_VERSION)"
	GOBIN=$(CURDIR)/.cache/tmp-bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	mv .cache/tmp-bin/golangci-lint $@ && rm -rf .cache/tmp-bin

.PHONY: lint
lint: $(GOLANGCI) ## golangci-lint: goimports, vet, staticcheck, unused, and the import rules of DESIGN §1 (.golangci.yml)
	$(GOLANGCI) run ./...

# mypy for the Python runtime (python/cyrnel, typed, py.typed): Debian's
# python3-mypy, installed with apt when missing and run as root; it runs
# under Debian's own interpreter, which may not be the python3 on PATH.
.PHONY: py-check
py-check: ## type-check the Python runtime with mypy (strict; installs Debian's python3-mypy where it can)
	@mypy=""; for py in $(PYTHON) /usr/bin/python3; do \
		if $$py -m mypy --version >/dev/null 2>&1; then mypy="$$py -m mypy"; break; fi; done; \
	if [ -z "$$mypy" ]; then \
		$(INSTALL) python3-mypy || { echo "mypy is required to check python/cyrnel: apt-get install python3-mypy, or pip install mypy"; exit 1; }; \
		mypy="/usr/bin/python3 -m mypy"; fi; \
	$$mypy

# Chromium for the console's browser tests, installed from Debian's package
# when missing (as root). Where that cannot be done the target fails: the
# console tests need it.
.PHONY: browser
browser: ## provide Chromium for the console tests (Debian, as root), or fail saying why
	@command -v chromium >/dev/null || { $(INSTALL) chromium && command -v chromium >/dev/null; }

# Debian's prometheus package (the server and promtool) for the metrics
# tests, installed when missing (as root). Where that cannot be done the
# target fails.
PROMETHEUS_CHECK := { command -v prometheus && command -v promtool; } >/dev/null
.PHONY: prometheus
prometheus: ## provide Prometheus and promtool for the metrics tests (Debian, as root), or fail saying why
	@$(PROMETHEUS_CHECK) || { $(INSTALL) prometheus && $(PROMETHEUS_CHECK); }

# Debian's numpy, pandas and matplotlib for /usr/bin/python3, the
# data-science sessions' interpreter in the tests (and the preload
# benchmarks'), installed when missing (as root). Where that cannot be done
# the target fails.
DATASCIENCE_CHECK := /usr/bin/python3 -c 'import numpy, pandas, matplotlib' >/dev/null 2>&1
.PHONY: datascience
datascience: ## provide python3-numpy, python3-pandas and python3-matplotlib for the data-science tests (Debian, as root), or fail saying why
	@$(DATASCIENCE_CHECK) || { $(INSTALL) python3-numpy python3-pandas python3-matplotlib && $(DATASCIENCE_CHECK); }

# The API reference's renderer, vendored so /docs works offline: Redoc's
# standalone bundle (MIT) from the npm registry, with its licenses. Its one
# fetch from elsewhere, the sidebar's logo from cdn.redoc.ly, is replaced by
# an empty image (Redoc then hides it).
REDOC_VERSION := 2.5.0
.PHONY: vendor-redoc
vendor-redoc: ## re-vendor Redoc $(REDOC_VERSION) (npm) into host/console/assets/vendor/redoc
	tmp=$$(mktemp -d) && (cd $$tmp && npm pack --silent redoc@$(REDOC_VERSION) >/dev/null && tar xzf redoc-$(REDOC_VERSION).tgz) && \
		cp $$tmp/package/bundles/redoc.standalone.js $$tmp/package/bundles/redoc.standalone.js.LICENSE.txt $$tmp/package/LICENSE host/console/assets/vendor/redoc/ && \
		sed -i 's|src:"https://cdn.redoc.ly/redoc/logo-mini.svg"|src:"data:,"|' host/console/assets/vendor/redoc/redoc.standalone.js && \
		rm -rf $$tmp

# PostgreSQL for the tests: CYRNEL_TEST_POSTGRES_URL when set, else a local
# cluster, installed from Debian's packages when missing and run as root;
# its URL goes to .cache/postgres-url. The server's binaries are installed in
# either case: a test runs a cluster of its own to restart it
# (host/pgtest.Server; CYRNEL_TEST_PG_BIN names another directory of them).
# Where neither can be had the target fails.
PG_TEST_URL := postgres://cyrnel:cyrnel@127.0.0.1:5432/cyrnel_test?sslmode=disable
.PHONY: test-db
test-db: ## provide a PostgreSQL for the tests (CYRNEL_TEST_POSTGRES_URL, or a local one on Debian as root), or fail saying why
	@mkdir -p .cache; rm -f .cache/postgres-url
	@[ -n "$$CYRNEL_TEST_PG_BIN" ] || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || $(INSTALL) postgresql || exit 1
	@if [ -n "$$CYRNEL_TEST_POSTGRES_URL" ]; then echo "tests use CYRNEL_TEST_POSTGRES_URL"; exit 0; fi; \
	ls /etc/postgresql/*/main >/dev/null 2>&1 || $(INSTALL) postgresql || exit 1; \
	[ "$$(id -u)" = 0 ] || { echo "a local PostgreSQL for the tests is run as root (su postgres); or set CYRNEL_TEST_POSTGRES_URL"; exit 1; }; \
	ver=$$(ls /etc/postgresql | sort -V | tail -1); \
	pg_ctlcluster $$ver main status >/dev/null || pg_ctlcluster $$ver main start || exit 1; \
	su postgres -c "pg_isready -q -t 10" || { echo "PostgreSQL $$ver did not become ready"; exit 1; }; \
	su postgres -c "psql -tAc \"SELECT 1 FROM pg_roles WHERE rolname='cyrnel'\"" | grep -q 1 || \
		su postgres -c "psql -qc \"CREATE USER cyrnel PASSWORD 'cyrnel' SUPERUSER\"" || exit 1; \
	su postgres -c "psql -tAc \"SELECT 1 FROM pg_database WHERE datname='cyrnel_test'\"" | grep -q 1 || \
		su postgres -c "createdb -O cyrnel cyrnel_test" || exit 1; \
	echo '$(PG_TEST_URL)' > .cache/postgres-url

.PHONY: bench
bench: deps datascience test-db ## run the benchmarks: medians and ratios against baselines measured in the same run (docs/benchmarks.md)
	@echo "== components"
	$(GO) test -run '^$$' -bench . -benchtime 200x -count 1 ./envs/... ./host/process ./host/store ./host/server
	@echo "== ranked tool search over the datadog-v2 document (top-1, top-5 hit rates, p50 query time)"
	$(GO) test -run '^$$' -bench ToolSearch -benchtime 56x -count 1 ./host/services
	@echo "== importing OpenAPI documents (time and peak memory per fixture)"
	$(GO) test -run '^$$' -bench Import -benchtime 3x -count 1 -timeout 30m ./host/adapters/openapi
	@echo "== through the HTTP API, against the real binary"
	$(GO) test -run '^$$' -bench 'WarmExecutionVsSpawn|TypeScriptExecution|ToolCall|Preload' -benchtime 100x -count 1 ./tests
	@echo "== sessions: an execution in a ready session, and creating one, through HTTP beside a Jupyter kernel's execute round trip and start"
	@/usr/bin/python3 -c 'import ipykernel, jupyter_client' >/dev/null 2>&1 || $(INSTALL) python3-ipykernel python3-jupyter-client
	$(GO) test -run '^$$' -bench 'SessionExecution|SessionCreate' -benchtime 200x -count 1 ./tests
	@echo "== sessions: the memory of 50 idle sessions (PSS per session) beside 10 idle Jupyter kernels"
	$(GO) test -run '^$$' -bench 'SessionMemory' -benchtime 1x -count 1 -timeout 30m ./tests
	@echo "== load: throughput with 8 clients, host memory over 10 000 executions"
	$(GO) test -run '^$$' -bench 'Throughput|HostMemory' -benchtime 1x -count 1 -timeout 30m ./tests
	@echo "== scale-out: 1, 2 and 3 hosts on one PostgreSQL (make test-db), 8 clients round-robin"
	CYRNEL_TEST_POSTGRES_URL="$${CYRNEL_TEST_POSTGRES_URL:-$$(cat .cache/postgres-url 2>/dev/null)}" \
		$(GO) test -run '^$$' -bench 'ScaleOut' -benchtime 1x -count 1 -timeout 30m ./tests
	@echo "== fresh interpreters forked from a template vs spawned vs python3 -I -S -c pass; pandas preloaded (also from a built package environment)"
	$(GO) test -run '^$$' -bench 'ForkTemplate|ForkPandas' -benchtime 1x -count 1 -timeout 30m ./tests
	@echo "== TypeScript through HTTP vs Node's vm.runInNewContext behind HTTP, 1 and 8 clients, alternating blocks"
	@command -v node >/dev/null || $(INSTALL) nodejs
	$(GO) test -run '^$$' -bench 'TypeScriptVsNode' -benchtime 1x -count 1 -timeout 30m ./tests
	@echo "== where the CPU of a fresh forked execution goes: server, template, children, kernel threads; fork floor and bare spawn (3 runs)"
	$(GO) test -run '^$$' -bench 'CPUSplit' -benchtime 1x -count 3 -timeout 30m ./tests
	@echo "== forking from a pandas template against the default one: the CPU of forking a pass at 8 clients (3 alternating pairs), bare fork floors with and without pandas"
	$(GO) test -run '^$$' -bench 'ForkCostPandas' -benchtime 1x -count 1 -timeout 30m ./tests
	@echo "== the first matplotlib plot in a new session (preload matplotlib) against the second, same session"
	$(GO) test -run '^$$' -bench 'FirstPlot' -benchtime 10x -count 1 -timeout 30m ./tests

.PHONY: openapi
openapi: ## regenerate the committed spec under openapi/ and the Go client generated from it
	$(GO) run ./cmd/cyrnel openapi --format json > openapi/openapi.json
	$(GO) run ./cmd/cyrnel openapi --format yaml > openapi/openapi.yaml
	$(GO) run ./cmd/cyrnel openapi --format json --3.0 > openapi/openapi-3.0.json
	$(GO) tool oapi-codegen -config openapi/client/oapi-codegen.yaml -o openapi/client/client.gen.go openapi/openapi.json

# The TypeScript clients: openapi-typescript + openapi-fetch and
# @hey-api/openapi-ts (with zod), the Node.js they need (22; hey-api wants
# >= 22.18) from the npm `node` package, all pinned in package-lock.json.
# TestTypeScriptClients (tests/) runs their scenarios against the server.
TS_CHECK := openapi/ts-check

.PHONY: ts-check
ts-check: $(TS_CHECK)/node_modules/.package-lock.json ## generate the TypeScript clients (openapi-typescript + openapi-fetch, @hey-api/openapi-ts) from the spec and type-check them with their scenarios
	cd $(TS_CHECK) && npm run --silent check

# npm writes node_modules/.package-lock.json on install: reinstall only when the lock file changes.
$(TS_CHECK)/node_modules/.package-lock.json: $(TS_CHECK)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js) is required for the TypeScript client check"; exit 1; }
	cd $(TS_CHECK) && npm ci --no-audit --no-fund --loglevel=error

# The official MCP conformance suite and the Node.js it needs (22; the suite
# uses fs.globSync), both pinned in package-lock.json and installed from the
# npm registry. TestMCPConformance (tests/) runs it against the built server.
MCP_CONFORMANCE := tests/testdata/mcp-conformance

.PHONY: mcp-conformance
mcp-conformance: $(MCP_CONFORMANCE)/node_modules/.package-lock.json ## install the pinned MCP conformance suite (npm) that TestMCPConformance runs against the server

$(MCP_CONFORMANCE)/node_modules/.package-lock.json: $(MCP_CONFORMANCE)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js) is required to install the MCP conformance suite"; exit 1; }
	cd $(MCP_CONFORMANCE) && npm ci --no-audit --no-fund --loglevel=error

# Dredd (14.1.0, the last release), the OpenAPI 3 conversion its hooks use
# and Node.js 22.23.3, pinned in package-lock.json and installed from the
# npm registry. TestDredd (tests/) runs it over the 3.0 document against the
# built server with the hooks in hooks.js.
DREDD := tests/testdata/dredd

.PHONY: dredd
dredd: $(DREDD)/node_modules/.package-lock.json ## install the pinned Dredd (npm) that TestDredd runs over every transaction of the OpenAPI document

$(DREDD)/node_modules/.package-lock.json: $(DREDD)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js) is required to install Dredd"; exit 1; }
	cd $(DREDD) && npm ci --no-audit --no-fund --loglevel=error

OPENAPI_LINT := openapi/lint

.PHONY: openapi-lint
openapi-lint: $(OPENAPI_LINT)/node_modules/.package-lock.json ## lint the committed OpenAPI documents (3.1 and the 3.0 rendering) with Redocly's recommended rules: zero errors
	cd $(OPENAPI_LINT) && npm run --silent lint

$(OPENAPI_LINT)/node_modules/.package-lock.json: $(OPENAPI_LINT)/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node.js) is required for the OpenAPI lint"; exit 1; }
	cd $(OPENAPI_LINT) && npm ci --no-audit --no-fund --loglevel=error

.PHONY: fmt
fmt: ## format the Go code
	gofmt -w $$(git ls-files '*.go')

.PHONY: clean
clean: ## remove build output (not the data directory)
	rm -rf bin
