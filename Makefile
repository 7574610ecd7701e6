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
test: deps ts-check test-db ## run every test CI runs: format, vet, the TypeScript client check, and the whole suite with the race detector (on SQLite, and PostgreSQL when test-db could provide one)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	CYRNEL_TEST_POSTGRES_URL="$$(cat .cache/postgres-url 2>/dev/null)" $(GO) test -race -count=1 -timeout 20m ./...

# PostgreSQL for the scale-out tests: a local cluster, installed from Debian's
# packages when missing and run as root. Where that cannot be done the tests
# run on SQLite only and say so.
PG_TEST_URL := postgres://cyrnel:cyrnel@127.0.0.1:5432/cyrnel_test?sslmode=disable
.PHONY: test-db
test-db: ## provide a local PostgreSQL for the tests (Debian, as root), or say why not
	@mkdir -p .cache; rm -f .cache/postgres-url
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
	else echo "no local PostgreSQL (needs Debian and root): PostgreSQL tests will be skipped"; fi

.PHONY: bench
bench: deps ## run the benchmarks: medians and ratios against baselines measured in the same run (docs/benchmarks.md)
	@echo "== components"
	$(GO) test -run '^$$' -bench . -benchtime 200x -count 1 ./envs/... ./host/process ./host/store ./host/server
	@echo "== importing OpenAPI documents (time and peak memory per fixture)"
	$(GO) test -run '^$$' -bench Import -benchtime 3x -count 1 -timeout 30m ./host/adapters/openapi
	@echo "== through the HTTP API, against the real binary"
	$(GO) test -run '^$$' -bench 'WarmExecutionVsSpawn|TypeScriptExecution|ToolCall|Preload' -benchtime 100x -count 1 ./tests
	@echo "== load: throughput with 8 clients, host memory over 10 000 executions"
	$(GO) test -run '^$$' -bench 'Throughput|HostMemory' -benchtime 1x -count 1 -timeout 30m ./tests
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

.PHONY: fmt
fmt: ## format the Go code
	gofmt -w $$(git ls-files '*.go')

.PHONY: clean
clean: ## remove build output (not the data directory)
	rm -rf bin
