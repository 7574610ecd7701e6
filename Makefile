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

.PHONY: deps
deps: ## check for (and on Debian, install) what builds and tests need: Go, Python 3, a C compiler for -race
	@command -v $(GO) >/dev/null || { echo "Go is required: https://go.dev/dl/"; exit 1; }
	@command -v $(PYTHON) >/dev/null || { echo "Python 3 is required"; exit 1; }
	@command -v "$$($(GO) env CC)" >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && apt-get install -y -qq gcc libc6-dev >/dev/null; \
		else echo "a C compiler is required for the race detector (apt-get install gcc)"; exit 1; fi; }
	@/usr/bin/python3 -c 'import numpy, pandas' 2>/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing python3-numpy and python3-pandas (preload tests and benchmarks)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy python3-pandas >/dev/null; \
		else echo "no numpy/pandas for /usr/bin/python3 (needs Debian and root): the preload test and benchmark will skip"; fi; }
	@$(GO) mod download

.PHONY: build
build: ## build bin/cyrnel and its sandbox helper bin/cyrnel-sandbox (ship them side by side)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/cyrnel ./cmd/cyrnel-sandbox

.PHONY: run
run: build ## run the server on its embedded defaults (SQLite in ./cyrnel-data, 127.0.0.1:9371)
	./$(BIN) serve

.PHONY: test
test: deps lint ts-check mcp-conformance py-check test-db browser datascience prometheus ## run every test CI runs: lint (gofmt, goimports, vet, staticcheck, the import rules), the TypeScript client check, the Python runtime's type check, the whole suite with the race detector (on SQLite, and PostgreSQL when test-db could provide one; the console in Chromium; the metrics scraped by Prometheus), then each fuzz target briefly
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	CYRNEL_TEST_POSTGRES_URL="$$(cat .cache/postgres-url 2>/dev/null)" \
	CYRNEL_TEST_NO_POSTGRES="$$(cat .cache/no-postgres 2>/dev/null)" \
	CYRNEL_TEST_NO_BROWSER="$${CYRNEL_TEST_NO_BROWSER:-$$(cat .cache/no-browser 2>/dev/null)}" \
	CYRNEL_TEST_NO_DATASCIENCE="$${CYRNEL_TEST_NO_DATASCIENCE:-$$(cat .cache/no-datascience 2>/dev/null)}" \
	CYRNEL_TEST_NO_PROMETHEUS="$${CYRNEL_TEST_NO_PROMETHEUS:-$$(cat .cache/no-prometheus 2>/dev/null)}" \
		$(GO) test -race -count=1 -timeout 20m ./...
	@$(MAKE) --no-print-directory fuzz

# Each fuzz target (a func Fuzz… in a _test.go file) runs for FUZZTIME; the
# corpus under testdata/fuzz is replayed by the ordinary tests as well.
FUZZTIME ?= 5s
.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 5s) each
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
	if [ -z "$$mypy" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing mypy (python3-mypy) for the Python runtime's type check"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-mypy) >/dev/null 2>&1 || true; \
		/usr/bin/python3 -m mypy --version >/dev/null 2>&1 && mypy="/usr/bin/python3 -m mypy"; fi; \
	if [ -z "$$mypy" ]; then echo "mypy is required to check python/cyrnel: apt-get install python3-mypy, or pip install mypy"; exit 1; fi; \
	$$mypy

# Chromium for the console's browser tests, installed from Debian's package
# when missing and run as root. Where that cannot be done, the reason goes to
# .cache/no-browser and make test passes it as CYRNEL_TEST_NO_BROWSER, the tests'
# named opt-out (without it a missing browser fails them).
.PHONY: browser
browser: ## provide Chromium for the console tests (Debian, as root), or say why not
	@mkdir -p .cache; rm -f .cache/no-browser
	@if ! command -v chromium >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Chromium for the console tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 || true; fi
	@if ! command -v chromium >/dev/null; then \
		why="no chromium: Debian's chromium package could not be installed (needs apt-get and root)"; \
		echo "$$why; the console's browser tests will be skipped"; echo "$$why" > .cache/no-browser; fi

# Debian's prometheus package (the server and promtool) for the metrics
# tests: Prometheus scrapes a running host, promtool checks the exposition
# and deploy/prometheus. Installed when missing and run as root; where that
# cannot be done, the reason goes to .cache/no-prometheus and make test
# passes it as CYRNEL_TEST_NO_PROMETHEUS (without it the tests fail). An
# install that was tried and failed fails the target.
.PHONY: prometheus
prometheus: ## provide Prometheus and promtool for the metrics tests (Debian, as root), or say why not
	@mkdir -p .cache; rm -f .cache/no-prometheus
	@if ! { command -v prometheus && command -v promtool; } >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Prometheus for the metrics tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus) >.cache/prometheus-install.log 2>&1 || \
			{ cat .cache/prometheus-install.log; echo "apt-get install prometheus failed"; exit 1; }; fi
	@if ! { command -v prometheus && command -v promtool; } >/dev/null; then \
		why="no prometheus/promtool: Debian's prometheus package could not be installed (needs apt-get and root)"; \
		echo "$$why; the metrics tests that need them will be skipped"; echo "$$why" > .cache/no-prometheus; fi

# Debian's numpy, pandas and matplotlib for /usr/bin/python3, the
# data-science sessions' interpreter in the tests, installed when missing and
# run as root. Where that cannot be done, the reason goes to
# .cache/no-datascience and make test passes it as CYRNEL_TEST_NO_DATASCIENCE
# (without it the data-science tests fail).
.PHONY: datascience
datascience: ## provide python3-numpy, python3-pandas and python3-matplotlib for the data-science tests (Debian, as root), or say why not
	@mkdir -p .cache; rm -f .cache/no-datascience
	@if ! /usr/bin/python3 -c 'import numpy, pandas, matplotlib' >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing python3-numpy python3-pandas python3-matplotlib for the data-science tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy python3-pandas python3-matplotlib) >/dev/null 2>&1 || true; fi
	@if ! /usr/bin/python3 -c 'import numpy, pandas, matplotlib' >/dev/null 2>&1; then \
		why="no data-science interpreter: /usr/bin/python3 lacks numpy, pandas or matplotlib and Debian's packages could not be installed (needs apt-get and root)"; \
		echo "$$why; the data-science tests will be skipped"; echo "$$why" > .cache/no-datascience; fi

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

# PostgreSQL for the scale-out tests: a local cluster, installed from Debian's
# packages when missing and run as root. Where that cannot be done the tests
# run on SQLite only and say so.
PG_TEST_URL := postgres://cyrnel:cyrnel@127.0.0.1:5432/cyrnel_test?sslmode=disable
.PHONY: test-db
test-db: ## provide a local PostgreSQL for the tests (Debian, as root), or say why not
	@mkdir -p .cache; rm -f .cache/postgres-url .cache/no-postgres
	@if ! ls /etc/postgresql/*/main >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing PostgreSQL for the scale-out tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null 2>&1 || true; fi
	@if ls /etc/postgresql/*/main >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		ver=$$(ls /etc/postgresql | sort -V | tail -1); \
		pg_ctlcluster $$ver main start 2>/dev/null || true; \
		for i in $$(seq 50); do su postgres -c "pg_isready -q" && break; sleep 0.2; done; \
		su postgres -c "psql -tAc \"SELECT 1 FROM pg_roles WHERE rolname='cyrnel'\"" | grep -q 1 || \
			su postgres -c "psql -qc \"CREATE USER cyrnel PASSWORD 'cyrnel' SUPERUSER\""; \
		su postgres -c "psql -tAc \"SELECT 1 FROM pg_database WHERE datname='cyrnel_test'\"" | grep -q 1 || \
			su postgres -c "createdb -O cyrnel cyrnel_test"; \
		echo '$(PG_TEST_URL)' > .cache/postgres-url; \
	else echo "no local PostgreSQL (needs Debian and root): PostgreSQL tests will be skipped"; \
		echo "make test-db could not install PostgreSQL (needs Debian and root)" > .cache/no-postgres; fi

.PHONY: bench
bench: deps ## run the benchmarks: medians and ratios against baselines measured in the same run (docs/benchmarks.md)
	@echo "== components"
	$(GO) test -run '^$$' -bench . -benchtime 200x -count 1 ./envs/... ./host/process ./host/store ./host/server
	@echo "== ranked tool search over the datadog-v2 document (top-1, top-5 hit rates, p50 query time)"
	$(GO) test -run '^$$' -bench ToolSearch -benchtime 56x -count 1 ./host/services
	@echo "== importing OpenAPI documents (time and peak memory per fixture)"
	$(GO) test -run '^$$' -bench Import -benchtime 3x -count 1 -timeout 30m ./host/adapters/openapi
	@echo "== through the HTTP API, against the real binary"
	$(GO) test -run '^$$' -bench 'WarmExecutionVsSpawn|TypeScriptExecution|ToolCall|Preload' -benchtime 100x -count 1 ./tests
	@echo "== sessions: an execution in a ready session through HTTP beside a Jupyter kernel's execute round trip"
	@if ! /usr/bin/python3 -c 'import ipykernel, jupyter_client' >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-ipykernel python3-jupyter-client) >/dev/null 2>&1 || true; fi
	@why=""; /usr/bin/python3 -c 'import ipykernel, jupyter_client' >/dev/null 2>&1 || \
		why="no Jupyter kernel: Debian's python3-ipykernel and python3-jupyter-client could not be installed (needs apt-get and root)"; \
	CYRNEL_TEST_NO_JUPYTER="$${CYRNEL_TEST_NO_JUPYTER:-$$why}" $(GO) test -run '^$$' -bench 'SessionExecution' -benchtime 200x -count 1 ./tests
	@echo "== load: throughput with 8 clients, host memory over 10 000 executions"
	$(GO) test -run '^$$' -bench 'Throughput|HostMemory' -benchtime 1x -count 1 -timeout 30m ./tests
	@echo "== scale-out: 1, 2 and 3 hosts on one PostgreSQL (make test-db), 8 clients round-robin"
	CYRNEL_TEST_POSTGRES_URL="$$(cat .cache/postgres-url 2>/dev/null)" \
	CYRNEL_TEST_NO_POSTGRES="$$(cat .cache/no-postgres 2>/dev/null)" \
		$(GO) test -run '^$$' -bench 'ScaleOut' -benchtime 1x -count 1 -timeout 30m ./tests
	@echo "== fresh interpreters forked from a template vs spawned vs python3 -I -S -c pass; pandas preloaded; TypeScript 2 vs 8 clients"
	$(GO) test -run '^$$' -bench 'ForkTemplate|ForkPandas|TypeScriptClients' -benchtime 1x -count 1 -timeout 30m ./tests

.PHONY: openapi
openapi: ## regenerate the committed spec under openapi/ and the Go client generated from it
	$(GO) run ./cmd/cyrnel openapi --format json > openapi/openapi.json
	$(GO) run ./cmd/cyrnel openapi --format yaml > openapi/openapi.yaml
	$(GO) run ./cmd/cyrnel openapi --format json --3.0 > openapi/openapi-3.0.json
	$(GO) tool oapi-codegen -config openapi/client/oapi-codegen.yaml -o openapi/client/client.gen.go openapi/openapi.json

TS_CHECK := openapi/ts-check

.PHONY: ts-check
ts-check: $(TS_CHECK)/node_modules/.package-lock.json ## type-check a TypeScript client generated by openapi-typescript from the spec against an example program
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

.PHONY: fmt
fmt: ## format the Go code
	gofmt -w $$(git ls-files '*.go')

.PHONY: clean
clean: ## remove build output (not the data directory)
	rm -rf bin
