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
	@$(GO) mod download

.PHONY: build
build: ## build bin/cyrnel
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/cyrnel

.PHONY: run
run: build ## run the server on its embedded defaults (SQLite in ./cyrnel-data, 127.0.0.1:9371)
	./$(BIN) serve

.PHONY: test
test: deps ## run every test CI runs: format, vet, and the whole suite with the race detector
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...

.PHONY: bench
bench: deps ## run the benchmarks (medians and ratios against baselines measured in the same run)
	$(GO) test -run '^$$' -bench . -benchtime 200x -count 1 -timeout 30m ./...

.PHONY: openapi
openapi: ## regenerate the committed spec under openapi/ and the Go client generated from it
	$(GO) run ./cmd/cyrnel openapi --format json > openapi/openapi.json
	$(GO) run ./cmd/cyrnel openapi --format yaml > openapi/openapi.yaml
	$(GO) run ./cmd/cyrnel openapi --format json --3.0 > openapi/openapi-3.0.json
	$(GO) tool oapi-codegen -config openapi/client/oapi-codegen.yaml -o openapi/client/client.gen.go openapi/openapi.json

.PHONY: fmt
fmt: ## format the Go code
	gofmt -w $$(git ls-files '*.go')

.PHONY: clean
clean: ## remove build output (not the data directory)
	rm -rf bin
