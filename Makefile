# tollgate: `make dev` runs everything on this machine; `make test` proves it.

TEMPORAL_CLI_VERSION := v1.5.1
TEMPORAL := bin/temporal
# The Temporal server itself and its SQL schema tool, for the cluster test:
# the server version the CLI's dev server embeds.
TEMPORAL_SERVER_VERSION := v1.29.1
TEMPORAL_SERVER := bin/temporal-server
TEMPORAL_SQL_TOOL := bin/temporal-sql-tool
VERSITYGW_VERSION := v1.8.0
VERSITYGW := bin/versitygw
STATICCHECK_VERSION := v0.8.2
STATICCHECK := bin/staticcheck
GOIMPORTS_VERSION := v0.52.0
GOIMPORTS := bin/goimports
# Real third-party MCP servers for the MCP tests, from npm (Node 20).
MCP_SERVERS_VERSION := 2026.8.31
MCP_SERVERS := bin/mcp/node_modules/.bin/mcp-server-everything
# The AI SDK's client (the `ai` package, pinned in the folder's
# package.json and package-lock.json) that the AI SDK tests drive in Node.
AI_SDK_DIR := api/testdata/aisdk
AI_SDK := $(AI_SDK_DIR)/node_modules/ai/package.json
# The same, for the example chat page that make dev serves.
AI_SDK_EXAMPLE_DIR := examples/ai-sdk-chat
AI_SDK_EXAMPLE := $(AI_SDK_EXAMPLE_DIR)/node_modules/ai/package.json
BINARIES := ./worker ./api ./cmd/scripted-model ./cmd/tollgate ./examples/ai-sdk-chat
# The race detector is on by default; `make test RACE=` turns it off.
RACE ?= -race

.PHONY: all temporal temporal-server versitygw staticcheck goimports mcp-servers ai-sdk ai-sdk-example build test cluster-test lint bench dev corpus

all: lint test

# The real Temporal CLI with its dev server and Web UI. The first build takes
# about six minutes on two cores; after that it is cached in bin/.
temporal: $(TEMPORAL)

# The CLI is built from third_party/temporal-cli, a module of its own: the
# release TEMPORAL_CLI_VERSION with a SQLite driver that does not leave its
# dev server interrupting every statement after a cancelled query (its
# go.mod says why). A change to that module builds it again.
TEMPORAL_CLI_MODULE := third_party/temporal-cli
$(TEMPORAL): $(TEMPORAL_CLI_MODULE)/go.mod $(TEMPORAL_CLI_MODULE)/go.sum
	cd $(TEMPORAL_CLI_MODULE) && go build -o $(CURDIR)/$(TEMPORAL) github.com/temporalio/cli/cmd/temporal

# The Temporal server (not the dev server) and temporal-sql-tool, for the
# cluster test; about three minutes to build the first time (less after the
# CLI's build, which shares most of it), then cached in bin/.
temporal-server: $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL)

$(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) &:
	GOBIN=$(CURDIR)/bin/.temporal-server go install \
		go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VERSION) \
		go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION)
	mv bin/.temporal-server/server $(TEMPORAL_SERVER)
	mv bin/.temporal-server/sql $(TEMPORAL_SQL_TOOL)
	rmdir bin/.temporal-server

# A real S3 server (versitygw) for the payload store's tests; about a
# minute to build the first time, then cached in bin/.
versitygw: $(VERSITYGW)

$(VERSITYGW):
	GOBIN=$(CURDIR)/bin go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

# The linter beyond go vet, from the Go module proxy into bin/.
staticcheck: $(STATICCHECK)

$(STATICCHECK):
	GOBIN=$(CURDIR)/bin go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# gofmt that also orders the imports: the standard library, then other
# modules, then this module's packages, each a group of its own.
goimports: $(GOIMPORTS)

$(GOIMPORTS):
	GOBIN=$(CURDIR)/bin go install golang.org/x/tools/cmd/goimports@$(GOIMPORTS_VERSION)

# The MCP reference servers the tests run over stdio and streamable HTTP:
# @modelcontextprotocol/server-filesystem and server-everything, into bin/mcp.
mcp-servers: $(MCP_SERVERS)

$(MCP_SERVERS):
	npm install --prefix bin/mcp --no-audit --no-fund --silent \
		@modelcontextprotocol/server-filesystem@$(MCP_SERVERS_VERSION) \
		@modelcontextprotocol/server-everything@$(MCP_SERVERS_VERSION)

# The AI SDK's client for api/aisdk_test.go (docs/ai-sdk.md), exactly as
# the lock file pins it, into api/testdata/aisdk/node_modules, and for the
# example page (examples/ai-sdk-chat), which its own lock file pins alike.
ai-sdk: $(AI_SDK) $(AI_SDK_EXAMPLE)

ai-sdk-example: $(AI_SDK_EXAMPLE)

$(AI_SDK): $(AI_SDK_DIR)/package.json $(AI_SDK_DIR)/package-lock.json
	npm ci --prefix $(AI_SDK_DIR) --no-audit --no-fund --silent
	touch $@

$(AI_SDK_EXAMPLE): $(AI_SDK_EXAMPLE_DIR)/package.json $(AI_SDK_EXAMPLE_DIR)/package-lock.json
	npm ci --prefix $(AI_SDK_EXAMPLE_DIR) --no-audit --no-fund --silent
	touch $@

build:
	go build -o bin/ $(BINARIES)

# Integration tests start their own Temporal dev server from bin/temporal,
# S3 server from bin/versitygw, MCP servers from bin/mcp and the AI SDK from
# api/testdata/aisdk and examples/ai-sdk-chat. Most API tests
# wait on those servers, on timers and on builds rather than use a core, so
# four of a package's parallel tests run at once (docs/testing.md).
test: $(TEMPORAL) $(VERSITYGW) $(MCP_SERVERS) $(AI_SDK) $(AI_SDK_EXAMPLE)
	go test $(RACE) -count=1 -parallel 4 -timeout 14m ./...

# The cluster test (cluster/, docs/testing.md): PostgreSQL from Debian's
# postgresql package, the Temporal server on it, two workers and two APIs,
# 200 turns while one worker and one API are killed; about a minute and a
# half after the builds. Not part of `make test`.
cluster-test: $(TEMPORAL) $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL)
	TOLLGATE_CLUSTER_TEST=1 go test -count=1 -v -run '^(TestEveryTurnFinishesOnceWhileAWorkerAndAnAPIAreKilled|TestAFreshNamespacesFirstMessagesAreAnswered)$$' -timeout 20m ./cluster/

# gofmt and goimports skip the agent's workspace and hidden folders: they
# are not ours.
GO_FILES = find . \( -path ./workspace -o -path './.*' \) -prune -o -name '*.go' -print
GOIMPORTS_FLAGS := -local github.com/tollgate/tollgate

lint: $(STATICCHECK) $(GOIMPORTS)
	@files="$$($(GO_FILES) | xargs gofmt -l)"; \
	if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi
	@files="$$($(GO_FILES) | xargs $(GOIMPORTS) $(GOIMPORTS_FLAGS) -l)"; \
	if [ -n "$$files" ]; then echo "goimports needed ($(GOIMPORTS) $(GOIMPORTS_FLAGS) -w FILE):"; echo "$$files"; exit 1; fi
	go vet ./...
	$(STATICCHECK) ./...

# The benchmark (package bench): the worker and API binaries against
# Temporal floors on a tuned dev server (raw), and of tollgate's shape at
# 1, 10 and 50 turns at a time on a fresh dev server and on the Temporal
# server on PostgreSQL (as for cluster-test), measured over HTTP and their
# /metrics, the history of each turn shape, then 2,000 turns waiting at once
# and hundreds of watchers on that server; some 15-25 minutes on two cores
# (RESULTS.md's "How long the run took" has each stage's time). The figures
# go to bench/RESULTS.md, which keeps the latest run and the one before,
# never into a test's verdict. For a quick try of the slow stages alone:
# TOLLGATE_BENCH_WAITING=100 with BenchmarkScale, TOLLGATE_BENCH_LOAD_TURNS=1
# with BenchmarkLoad (bench/bench_test.go).
bench: $(TEMPORAL) $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL)
	@start=$$(date +%s); \
	TOLLGATE_BENCH_OUT=$(CURDIR)/bench/RESULTS.md \
		go test -run '^$$' -bench '^BenchmarkTollgate$$' -benchtime 1x -timeout 60m ./bench/; \
	status=$$?; echo "make bench: $$(( $$(date +%s) - start )) s in all (each stage's time is in bench/RESULTS.md)"; exit $$status

# Records the replay corpus of a release from a run of today's workflow
# code on a dev server: `make corpus RELEASE=v0.2.0` writes
# workflows/testdata/replay/v0.2.0 (see docs/versioning.md).
corpus: $(TEMPORAL)
	@test -n "$(RELEASE)" || { echo "usage: make corpus RELEASE=vX.Y.Z"; exit 2; }
	TOLLGATE_RECORD_CORPUS=$(RELEASE) TOLLGATE_RECORD_ONLY=$(ONLY) go test -count=1 -run '^TestRecordReplayCorpus$$' ./workflows/

# The Temporal CLI is TEMPORAL_CLI, or temporal on PATH at
# TEMPORAL_CLI_VERSION, or bin/temporal, which scripts/dev.sh builds (saying
# so, and how long) when it is missing.
dev:
	scripts/dev.sh
