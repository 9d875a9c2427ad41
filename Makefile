# Batcher's build. `make help` lists the targets.

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

# Pinned tool versions.
BUF_VERSION                := v1.75.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GOLANGCI_LINT_VERSION      := v2.15.0
GRPCURL_VERSION            := v1.9.4
BENCHSTAT_VERSION          := v0.0.0-20260908200009-22c9c6c9d4da

# The daemon's flags for `make run`; e.g. make run ARGS='--config batcherd.yaml'.
ARGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: ## Run batcherd on its embedded simulated provider (127.0.0.1:50051).
	$(GO) run ./cmd/batcherd $(ARGS)

.PHONY: llmsim
llmsim: ## Run the OpenAI-compatible simulator (127.0.0.1:8080).
	$(GO) run ./cmd/llmsim $(ARGS)

.PHONY: build
build: ## Build batcherd and llmsim into bin/.
	$(GO) build -o $(BIN)/ ./cmd/...

.PHONY: test
test: tools-gen ## Vet, check generated code is fresh, run every test with -race.
	$(GO) vet ./...
	$(MAKE) --no-print-directory check-generate
	$(GO) test -race -count=1 -timeout 15m ./...
	cd bench && $(GO) vet ./...

.PHONY: generate
generate: tools-gen ## Regenerate gen/ from proto/ with buf.
	buf generate

.PHONY: check-generate
check-generate: generate ## Fail when gen/ is stale.
	@if [ -n "$$(git status --porcelain -- gen proto)" ]; then \
		echo "generated code is stale: run make generate and commit"; git status --porcelain -- gen proto; exit 1; fi

.PHONY: lint
lint: tools-gen tools-lint ## go vet, golangci-lint, buf lint and buf format.
	$(GO) vet ./...
	golangci-lint run ./...
	buf lint
	buf format -d --exit-code

.PHONY: fuzz
fuzz: ## Run every fuzz test for FUZZTIME each (default 20s).
	@for p in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "== $$p $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-20s} $$p || exit 1; \
		done; done

.PHONY: bench
bench: ## Run the benchmarks (6 runs each) and summarize them with benchstat.
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./batcher/... ./server/... ./client/... ./backend/... | tee bench-service.txt
	benchstat bench-service.txt
	bench/run.sh

.PHONY: tools
tools: tools-gen tools-lint tools-bench ## Install every pinned tool into bin/.
	GOBIN=$(BIN) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

.PHONY: tools-gen
tools-gen: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

.PHONY: tools-lint
tools-lint: $(BIN)/golangci-lint
$(BIN)/golangci-lint:
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: tools-bench
tools-bench: $(BIN)/benchstat
$(BIN)/benchstat:
	GOBIN=$(BIN) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)
