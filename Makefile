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

# Generated trees, each in a directory of its own (buf's clean: true empties them).
PY_GEN    := clients/python/batcher_client/_gen
GENERATED := gen $(PY_GEN) clients/java/gen

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

.PHONY: soak
soak: ## About 3 minutes of mixed traffic against batcherd and a faulty llmsim, then SIGTERM; prints the tally.
	$(GO) build -o $(BIN)/ ./cmd/batcherd ./cmd/llmsim ./cmd/soak
	$(BIN)/soak -mode soak -batcherd $(BIN)/batcherd -llmsim $(BIN)/llmsim

.PHONY: soak-unread
soak-unread: ## batcherd's RSS with 1,000 streams that never read (add ARGS=-unlimited for the baseline).
	$(GO) build -o $(BIN)/ ./cmd/batcherd ./cmd/soak
	$(BIN)/soak -mode unread -batcherd $(BIN)/batcherd $(ARGS)

.PHONY: build
build: ## Build every command (batcherd, batcherctl, llmsim, llmbench, soak) into bin/.
	$(GO) build -o $(BIN)/ ./cmd/...

.PHONY: test
test: tools-gen ## Vet, check generated code is fresh, run every test with -race.
	$(GO) vet ./...
	$(MAKE) --no-print-directory check-generate
	@$(MAKE) --no-print-directory check-services
	$(GO) test -race -count=1 -timeout 15m ./...
	$(GO) test -count=1 -run '^TestDoReusesCalls$$' ./batcher/ # allocation counts: the race detector's pools drop what is put back
	$(GO) test -count=1 -run '^TestChunkUsageNullNoAlloc$$' ./openaiapi/
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	$(MAKE) --no-print-directory test-python test-java

# Tests that need PostgreSQL or Redis skip without them (and fail instead
# with BATCHER_REQUIRE_SERVICES=1, as in CI), and so do those that need an
# outside tool, Chromium or Prometheus (BATCHER_REQUIRE_TOOLS=1); say so up
# front, since go test prints skips only with -v.
.PHONY: check-services
check-services:
	@if command -v chromium >/dev/null; then echo "chromium found: the status page test runs in it"; \
	else echo "SKIPPING the status page test in Chromium: no chromium on PATH (apt-get install -y chromium)"; fi
	@if command -v prometheus >/dev/null; then echo "prometheus found: the Prometheus scrape test runs"; \
	else echo "SKIPPING the Prometheus scrape test: no prometheus on PATH (apt-get install -y prometheus)"; fi
	@if (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then echo "PostgreSQL on 127.0.0.1:5432: the PostgreSQL job-store tests run"; \
	else echo "SKIPPING the PostgreSQL job-store tests: nothing answers on 127.0.0.1:5432"; fi
	@if (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then echo "Redis on 127.0.0.1:6379: the fleet tests run"; \
	else echo "SKIPPING the fleet tests (shared budgets over Redis): nothing answers on 127.0.0.1:6379"; fi

# The Python and Java client tests run when Debian's toolchains are present
# (clients/tools.sh install python java) and say that they skip otherwise;
# with BATCHER_REQUIRE_TOOLS=1 (CI) a missing toolchain fails instead.
.PHONY: test-python
test-python: ## Run the Python client's tests (pytest, Debian's python3) against a real batcherd.
	@if missing=$$(clients/tools.sh check python); then \
		GO=$(GO) /usr/bin/python3 -m pytest -q -p no:cacheprovider clients/python/tests; \
	elif [ "$${BATCHER_REQUIRE_TOOLS:-}" = 1 ]; then \
		echo "test-python: $$missing (BATCHER_REQUIRE_TOOLS=1)"; exit 1; \
	else echo "test-python: SKIPPED, $$missing (clients/tools.sh install python)"; fi

.PHONY: test-java
test-java: ## Compile the Java client with javac and run it against a real batcherd.
	@if missing=$$(clients/tools.sh check java); then \
		GO=$(GO) clients/java/test.sh; \
	elif [ "$${BATCHER_REQUIRE_TOOLS:-}" = 1 ]; then \
		echo "test-java: $$missing (BATCHER_REQUIRE_TOOLS=1)"; exit 1; \
	else echo "test-java: SKIPPED, $$missing (clients/tools.sh install java)"; fi

.PHONY: generate
generate: tools-gen tools-gen-debian ## Regenerate gen/ and the Python and Java clients from proto/ with buf.
	buf generate
	@# google.rpc.Status for Python, by protoc from the source: buf's image
	@# would add json_name to its descriptor, which must equal
	@# googleapis-common-protos' own byte for byte, or the two cannot load
	@# into one process.
	protoc -I proto/third_party --python_out=$(PY_GEN) --pyi_out=$(PY_GEN) google/rpc/status.proto
	@# protoc's Python imports are absolute (batcher.v1, google.rpc); make them
	@# point into the batcher_client package, so nothing lands at top level.
	find $(PY_GEN) \( -name '*.py' -o -name '*.pyi' \) -exec sed -i -E 's/^from (batcher|google\.rpc)([. ])/from batcher_client._gen.\1\2/' {} +

.PHONY: check-generate
check-generate: generate ## Fail when generated code is stale.
	@if [ -n "$$(git status --porcelain -- $(GENERATED) proto)" ]; then \
		echo "generated code is stale: run make generate and commit"; git status --porcelain -- $(GENERATED) proto; exit 1; fi

.PHONY: lint
lint: tools-gen tools-lint ## go vet, golangci-lint (the module and bench/'s), buf lint and buf format.
	$(GO) vet ./...
	golangci-lint run ./...
	cd bench && $(GO) vet ./... && golangci-lint run ./...
	buf lint
	buf format -d --exit-code

.PHONY: fuzz
fuzz: ## Run every fuzz test for FUZZTIME each (default 20s).
	@for p in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "== $$p $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-20s} $$p || exit 1; \
		done; done

.PHONY: fleet-soak
fleet-soak: ## Three batcherd on one llmsim at 600 RPM through Redis for 3 minutes (BENCHMARKS.md's fleet figures).
	BATCHER_FLEET_SOAK=$${SOAK:-3m} BATCHER_REQUIRE_SERVICES=1 $(GO) test -count=1 -timeout 20m -run 'TestFleetEndToEnd$$' -v ./cmd/batcherd/ | grep -E 'fleet_e2e|^(---|ok|FAIL)'
	$(GO) test -count=1 -run '^$$' -bench 'BenchmarkFleetBooking' -benchtime 2000x ./fleet/

.PHONY: bench
bench: ## Run the benchmarks (6 runs each) and summarize them with benchstat.
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./batcher/... ./server/... ./client/... ./backend/... | tee bench-service.txt
	benchstat bench-service.txt
	bench/run.sh

.PHONY: tools
tools: tools-gen tools-lint tools-bench grpcurl ## Install every pinned tool into bin/.

.PHONY: grpcurl
grpcurl: $(BIN)/grpcurl ## Install the pinned grpcurl into bin/ (the quickstart's; only this tool).

$(BIN)/grpcurl:
	GOBIN=$(BIN) $(GO) install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

.PHONY: tools-gen
tools-gen: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

# Python and Java code is generated by Debian bookworm's protoc and gRPC
# plugins, whose versions match the runtimes users install from Debian.
.PHONY: tools-gen-debian
tools-gen-debian:
	@$(CURDIR)/clients/tools.sh generate

.PHONY: tools-lint
tools-lint: $(BIN)/golangci-lint
$(BIN)/golangci-lint:
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: tools-bench
tools-bench: $(BIN)/benchstat
$(BIN)/benchstat:
	GOBIN=$(BIN) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

.PHONY: bench-doc
bench-doc: ## Regenerate BENCHMARKS.md's core and gRPC tables from bench/results.txt.
	bench/doc.sh results.txt
