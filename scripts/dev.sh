#!/usr/bin/env bash
# make dev: run tollgate on this machine. A tuned Temporal dev server with its
# Web UI, the scripted model when no OPENAI_API_KEY is set, the worker and the
# API. Ctrl-C stops them all (exit 0 when they all stop). Logs go to
# $TOLLGATE_STATE_DIR/logs.
#
# The Temporal CLI is $TEMPORAL_CLI when set, else `temporal` on PATH when it
# is the version the Makefile names, else bin/temporal, built the first time.
# TOLLGATE_DEV_BIN (default bin) is where tollgate's binaries are built;
# TOLLGATE_DEV_TEMPORAL_PORT, TOLLGATE_DEV_UI_PORT and TOLLGATE_DEV_MODEL_ADDR
# move the dev server, its Web UI and the scripted model (the README's tour
# test runs a second stack so); TOLLGATE_DEV_EXAMPLE_ADDR the AI SDK example
# page (examples/ai-sdk-chat; off leaves it out). TOLLGATE_DEV_PROBE_EVERY,
# TOLLGATE_DEV_PROBE_TIMEOUT and TOLLGATE_DEV_PROBE_FAILURES set how make dev
# watches its dev server (below); TOLLGATE_DEV_BUILD_HEARTBEAT how often (in
# seconds) it says that the Temporal CLI's build is still going. The tests
# shorten them, not to wait out the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE_DIR=${TOLLGATE_STATE_DIR:-.tollgate}
LOGS=$STATE_DIR/logs
BIN=${TOLLGATE_DEV_BIN:-bin}
TEMPORAL_PORT=${TOLLGATE_DEV_TEMPORAL_PORT:-7233}
UI_PORT=${TOLLGATE_DEV_UI_PORT:-8233}
MODEL_ADDR=${TOLLGATE_DEV_MODEL_ADDR:-127.0.0.1:8090}
EXAMPLE_ADDR=${TOLLGATE_DEV_EXAMPLE_ADDR:-127.0.0.1:8070}
export TEMPORAL_ADDRESS=127.0.0.1:$TEMPORAL_PORT
export TEMPORAL_NAMESPACE=${TEMPORAL_NAMESPACE:-default}
export HTTP_ADDR=${HTTP_ADDR:-127.0.0.1:8080}
export TOLLGATE_WORKSPACE=${TOLLGATE_WORKSPACE:-./workspace}
export TOLLGATE_AGENTS_DIR=${TOLLGATE_AGENTS_DIR:-./agents}
# Payloads too large for history, shared by the worker and the API.
export TOLLGATE_PAYLOAD_DIR=${TOLLGATE_PAYLOAD_DIR:-$STATE_DIR/payloads}
# The audit ledger, a SQLite file the worker writes and the API reads.
export TOLLGATE_AUDIT_DB=${TOLLGATE_AUDIT_DB:-$STATE_DIR/audit.db}
# A protected Bash call runs in the sandbox first, and the person approves
# what it changed (docs/sandbox.md); where the sandbox cannot start, the
# worker and the banner say so, and Bash asks as without it.
export TOLLGATE_BASH_SANDBOX=${TOLLGATE_BASH_SANDBOX:-preview}
# Everything talks over loopback: gzip would only cost CPU.
export TOLLGATE_GRPC_COMPRESSION=${TOLLGATE_GRPC_COMPRESSION:-none}
# Long enough to follow the README's tour at a reading pace; the default
# of a deployment is 3m.
export TOLLGATE_APPROVAL_TIMEOUT=${TOLLGATE_APPROVAL_TIMEOUT:-30m}
# Notices carry signed one-click decision links, under the API's address;
# the secret is made once and kept in the state folder.
export TOLLGATE_PUBLIC_URL=${TOLLGATE_PUBLIC_URL:-http://${HTTP_ADDR/#:/127.0.0.1:}}
if [ -z "${TOLLGATE_LINK_SECRET:-}" ]; then
	mkdir -p "$STATE_DIR"
	[ -s "$STATE_DIR/link-secret" ] || (umask 077 && head -c 32 /dev/urandom | base64 >"$STATE_DIR/link-secret")
	TOLLGATE_LINK_SECRET=$(cat "$STATE_DIR/link-secret")
	export TOLLGATE_LINK_SECRET
fi
# Without a chat hook of yours, the scripted model's process keeps the
# notices in the logs, a JSON line each.
NOTICES=""
if [ -z "${TOLLGATE_NOTIFY_URL:-}" ]; then
	NOTICES=$LOGS/notices.jsonl
	export TOLLGATE_NOTIFY_URL=http://$MODEL_ADDR/notices
fi
# The Web UI reads those payloads through the API's codec endpoint.
export TOLLGATE_CODEC_ORIGINS=${TOLLGATE_CODEC_ORIGINS:-http://127.0.0.1:$UI_PORT,http://localhost:$UI_PORT}

say() { printf 'dev: %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }

# ---- process supervision --------------------------------------------------
pids=() names=() heartbeat=""
# cleanup stops what was started, API first, and exits with rc; after an
# interrupt (Ctrl-C, a TERM) with 0 once everything stopped by itself, as
# asked, or 130 when the interrupt came before anything ran.
cleanup() {
	local rc=$? how=${1:-exit}
	trap - INT TERM EXIT
	set +e
	[ -z "$heartbeat" ] || kill "$heartbeat" 2>/dev/null
	if [ "$how" = interrupt ]; then
		rc=130
		((${#pids[@]} == 0)) || rc=0
	fi
	((${#pids[@]})) || exit $rc
	say "stopping ${names[*]}"
	# Reverse order: the API and worker leave before the server they use.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
	for _ in $(seq 100); do
		alive=0
		for pid in "${pids[@]}"; do if kill -0 "$pid" 2>/dev/null; then alive=1; fi; done
		if ((!alive)); then
			[ "$how" != interrupt ] || say "stopped"
			exit $rc
		fi
		sleep 0.1
	done
	say "killing what did not stop within 10s"
	for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
	exit $((rc ? rc : 1))
}
trap 'cleanup interrupt' INT TERM
trap cleanup EXIT

# ---- the Temporal CLI -----------------------------------------------------
mkdir -p "$LOGS"
# The version the Makefile installs; its dev server is Temporal Server
# TEMPORAL_SERVER_VERSION, which a `go install` build reports (it says
# version 0.0.0-DEV), and a release says both.
makefile_var() { sed -n "s/^$1 := //p" Makefile; }
cli_version=$(makefile_var TEMPORAL_CLI_VERSION)
server_version=$(makefile_var TEMPORAL_SERVER_VERSION)
# is_wanted_cli BIN: BIN is the Temporal CLI make dev is made for.
is_wanted_cli() {
	local v
	v=$("$1" --version 2>/dev/null) || return 1
	[[ $v == "temporal version ${cli_version#v} "* || $v == *"(Server ${server_version#v},"* ]]
}
BUILD_HEARTBEAT=${TOLLGATE_DEV_BUILD_HEARTBEAT:-15}
# minsec SECONDS: 2m05s.
minsec() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
# build_cli builds bin/temporal with make, saying first what, why and how
# long, then every BUILD_HEARTBEAT seconds that it is still going. The build runs in the
# foreground, so Ctrl-C stops it; the heartbeat ends with this script.
build_cli() {
	local log=$LOGS/temporal-build.log
	cat <<END
dev: building the Temporal CLI $cli_version into bin/temporal. make dev runs
dev: Temporal's dev server and Web UI from it; tollgate's workflows run there.
dev: The first build compiles some 1,300 packages (from the Go module
dev: proxy): about six minutes on two cores, less on more. It is done
dev: once: bin/temporal is reused after that.
dev: To use a Temporal CLI you have instead, stop this (Ctrl-C) and run
dev:   TEMPORAL_CLI=/path/to/temporal make dev
dev: (or put temporal $cli_version on your PATH). The build's log: $log
END
	local start=$SECONDS rc=0
	(
		for ((i = 1; ; i++)); do
			sleep 1
			kill -0 $$ 2>/dev/null || exit 0
			((i % BUILD_HEARTBEAT)) || say "still building the Temporal CLI: $(minsec $((SECONDS - start))) so far, $(grep -vc '^go: \|^GOBIN=' "$log") of about 1,300 packages compiled"
		done
	) &
	heartbeat=$!
	GOFLAGS="${GOFLAGS:+$GOFLAGS }-v" make --no-print-directory temporal >"$log" 2>&1 || rc=$?
	kill "$heartbeat" 2>/dev/null || true
	heartbeat=""
	((rc == 0)) || die "building the Temporal CLI failed; the end of $log:
$(tail -n 20 "$log")"
	say "built bin/temporal in $(minsec $((SECONDS - start)))"
}
if [ -n "${TEMPORAL_CLI:-}" ]; then
	TEMPORAL=$(command -v "$TEMPORAL_CLI" 2>/dev/null) && [ -x "$TEMPORAL" ] ||
		die "TEMPORAL_CLI=$TEMPORAL_CLI is not a program that runs"
	is_wanted_cli "$TEMPORAL" || say "warning: TEMPORAL_CLI=$TEMPORAL_CLI says '$("$TEMPORAL" --version 2>&1 | head -n 1)'; make dev is made for $cli_version (Server $server_version), and another version may not take every flag it gives"
elif [ -x bin/temporal ]; then
	# make temporal's build, whose SQLite driver does not wedge the dev
	# server (third_party/temporal-cli/go.mod), before a release on PATH;
	# built again when older than that module (a go install of the release
	# left by an earlier checkout, say).
	TEMPORAL=bin/temporal
	make -q --no-print-directory "$TEMPORAL" 2>/dev/null || build_cli
elif command -v temporal >/dev/null && is_wanted_cli "$(command -v temporal)"; then
	TEMPORAL=$(command -v temporal)
	say "temporal on your PATH is the release $cli_version, whose SQLite driver can leave its dev server stopped under a burst (make dev then restarts it); make temporal builds one without that fault into bin/temporal"
else
	TEMPORAL=bin/temporal
	if [ ! -x "$TEMPORAL" ] && command -v temporal >/dev/null; then
		say "temporal on your PATH says '$(temporal --version 2>&1 | head -n 1)', not $cli_version (Server $server_version); TEMPORAL_CLI=$(command -v temporal) make dev uses it anyway"
	fi
	[ -x "$TEMPORAL" ] || build_cli
fi
say "the Temporal CLI: $TEMPORAL"

# ---- build ----------------------------------------------------------------
say "building tollgate into $BIN/: worker, api, scripted-model, tollgate (the terminal client) and ai-sdk-chat (the AI SDK example)"
go build -o "$BIN/" ./worker ./api ./cmd/scripted-model ./cmd/tollgate ./examples/ai-sdk-chat

# start NAME CMD...: runs CMD in the background with its output in the log.
start() {
	local name=$1; shift
	"$@" >"$LOGS/$name.log" 2>&1 &
	pids+=($!) names+=("$name")
}

# wait_port NAME HOST:PORT: waits until the port accepts connections, or
# fails when the process NAME (the last started) exits or 60s pass.
wait_port() {
	local name=$1 host=${2%:*} port=${2##*:}
	[ -n "$host" ] || host=127.0.0.1
	for _ in $(seq 600); do
		(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && return 0
		kill -0 "${pids[-1]}" 2>/dev/null || die "$name exited; see $LOGS/$name.log:
$(tail -n 20 "$LOGS/$name.log")"
		sleep 0.1
	done
	die "$name not listening on $host:$port after 60s; see $LOGS/$name.log"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---- Temporal -------------------------------------------------------------
port_free $TEMPORAL_PORT || die "port $TEMPORAL_PORT is in use: is another Temporal server running?"
# A port taken by someone else would pass wait_port below and show their
# server as ours; fail now instead, with the port's name.
ports=("$UI_PORT:the Temporal Web UI" "${HTTP_ADDR##*:}:the API ($HTTP_ADDR)")
{ [ -n "${OPENAI_API_KEY:-}" ] && [ -z "$NOTICES" ]; } || ports+=("${MODEL_ADDR##*:}:the scripted model")
[ "$EXAMPLE_ADDR" = off ] || ports+=("${EXAMPLE_ADDR##*:}:the AI SDK example ($EXAMPLE_ADDR)")
for p in "${ports[@]}"; do
	port_free "${p%%:*}" || die "port ${p%%:*}, for ${p#*:}, is in use: is another tollgate running?"
done
namespace_flag=()
[ "$TEMPORAL_NAMESPACE" = default ] || namespace_flag=(--namespace "$TEMPORAL_NAMESPACE")
# Tuned for one machine, as internal/devserver tunes the tests' servers
# (TestMakeDevTunesItsServerAlike keeps the two alike).
temporal_args=(server start-dev --ip 127.0.0.1 --port $TEMPORAL_PORT
	--ui-port $UI_PORT --log-level warn
	--ui-codec-endpoint "http://${HTTP_ADDR/#:/127.0.0.1:}/codec"
	--db-filename "$STATE_DIR/temporal.db" "${namespace_flag[@]}"
	--sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal
	--sqlite-pragma journal_size_limit=16777216
	--dynamic-config-value history.transferProcessorMaxPollRPS=1000
	--dynamic-config-value matching.numTaskqueueReadPartitions=1
	--dynamic-config-value matching.numTaskqueueWritePartitions=1
	--dynamic-config-value system.enableActivityEagerExecution=true
	--dynamic-config-value matching.longPollExpirationInterval=5)
# The dev server keeps its database behind one SQLite connection, and the
# SQLite driver it is built with (modernc.org/sqlite v1.34.1) can leave that
# connection refusing every statement with `interrupted (9)` for good: a
# query whose caller gives up just after its first row leaks the statement,
# and the interrupt stays set while any statement is open. Under load many
# callers give up, and one is unlucky: the server then answers nothing
# (`Namespace default is not found`) until it restarts. So make dev asks it
# every PROBE_EVERY seconds whether it serves the namespace, and restarts it
# (same database, same ports; every workflow carries on) when PROBE_FAILURES
# asks in a row went unanswered within PROBE_TIMEOUT seconds each.
# docs/production.md has the measurements.
PROBE_EVERY=${TOLLGATE_DEV_PROBE_EVERY:-5}
PROBE_TIMEOUT=${TOLLGATE_DEV_PROBE_TIMEOUT:-5}
PROBE_FAILURES=${TOLLGATE_DEV_PROBE_FAILURES:-3}
# probe_temporal: the dev server answers for its namespace in time.
probe_temporal() {
	"$TEMPORAL" operator namespace describe --address "$TEMPORAL_ADDRESS" \
		--namespace "$TEMPORAL_NAMESPACE" --command-timeout "${PROBE_TIMEOUT}s" >/dev/null 2>&1
}
# supervise_temporal runs the dev server, restarts it when it stops
# answering, and exits with its status when it exits by itself. A TERM or
# an INT stops it (make dev's cleanup, Ctrl-C).
supervise_temporal() {
	set +e # it runs in a subshell of its own
	local child="" nap="" failures restarts=0 stopping=0
	trap 'stopping=1; kill -TERM $child $nap 2>/dev/null' TERM INT
	while :; do
		"$TEMPORAL" "${temporal_args[@]}" >>"$LOGS/temporal.log" 2>&1 &
		child=$! failures=0
		while ((!stopping)) && kill -0 "$child" 2>/dev/null; do
			sleep "$PROBE_EVERY" &
			nap=$!
			wait $nap 2>/dev/null
			((!stopping)) || break
			if probe_temporal; then
				failures=0
			elif ((++failures >= PROBE_FAILURES)); then
				restarts=$((restarts + 1))
				say "the Temporal dev server has not answered for $((failures * PROBE_EVERY))s; restarting it (restart $restarts; its log: $LOGS/temporal.log)" >&2
				printf '%s dev: restarting the dev server: %d probes in a row unanswered\n' "$(date -u +%FT%TZ)" "$failures" >>"$LOGS/temporal.log"
				stop_child
				continue 2
			fi
		done
		wait "$child"
		local status=$?
		# A signal to this shell ends that wait early: the server is
		# still stopping.
		((!stopping)) || { stop_child; status=0; }
		exit $status
	done
}
# stop_child stops supervise_temporal's server: TERM, and KILL if it has not
# exited within 5s (a server that answers nothing may not stop either).
stop_child() {
	kill -TERM "$child" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$child" 2>/dev/null
	wait "$child" 2>/dev/null
}
: >"$LOGS/temporal.log"
supervise_temporal &
pids+=($!) names+=(temporal)
wait_port temporal "$TEMPORAL_ADDRESS"
for i in $(seq 300); do
	"$TEMPORAL" operator namespace describe --address "$TEMPORAL_ADDRESS" \
		--namespace "$TEMPORAL_NAMESPACE" >/dev/null 2>&1 && break
	((i < 300)) || die "Temporal does not serve namespace $TEMPORAL_NAMESPACE after 30s; see $LOGS/temporal.log"
	sleep 0.1
done

# ---- model ----------------------------------------------------------------
# The scripted model's process runs when it is the model or the notices'
# hook.
if [ -z "${OPENAI_API_KEY:-}" ] || [ -n "$NOTICES" ]; then
	start scripted-model "$BIN/scripted-model" -addr $MODEL_ADDR ${NOTICES:+-notices "$NOTICES"}
	wait_port scripted-model $MODEL_ADDR
fi
if [ -z "${OPENAI_API_KEY:-}" ]; then
	export OPENAI_BASE_URL=http://$MODEL_ADDR/v1 OPENAI_API_KEY=scripted OPENAI_MODEL=scripted
	model="the scripted demo model (set OPENAI_API_KEY for a real one)"
else
	model="${OPENAI_MODEL:-gpt-4o-mini} at ${OPENAI_BASE_URL:-OpenAI}"
fi

# ---- workspace, worker, API -----------------------------------------------
mkdir -p "$TOLLGATE_WORKSPACE"
if [ -z "$(ls -A "$TOLLGATE_WORKSPACE")" ]; then
	cat >"$TOLLGATE_WORKSPACE/README.md" <<'EOF'
# Workspace

The agent's Read, Write, Edit and Bash tools work in this folder and nowhere
else. Every Write, Edit and Bash call waits for your approval.
EOF
fi

start worker "$BIN/worker"
worker_pid=${pids[-1]}
start api "$BIN/api"
api=$HTTP_ADDR
[ "${api%%:*}" ] || api=127.0.0.1$api
wait_port api "$api"

# The AI SDK example page, in front of the API: it needs the SDK from npm
# (make ai-sdk-example, pinned by its package-lock.json).
example="off (TOLLGATE_DEV_EXAMPLE_ADDR=off)"
if [ "$EXAMPLE_ADDR" != off ]; then
	if [ ! -f examples/ai-sdk-chat/node_modules/ai/package.json ] && command -v npm >/dev/null; then
		say "installing the AI SDK for the example page from npm (make ai-sdk-example)"
		make --no-print-directory ai-sdk-example >"$LOGS/ai-sdk-install.log" 2>&1 ||
			say "installing the AI SDK failed; see $LOGS/ai-sdk-install.log"
	fi
	if [ -f examples/ai-sdk-chat/node_modules/ai/package.json ]; then
		start ai-sdk-chat "$BIN/ai-sdk-chat" -addr "$EXAMPLE_ADDR" -api "http://$api" -dir examples/ai-sdk-chat
		wait_port ai-sdk-chat "$EXAMPLE_ADDR"
		example="http://$EXAMPLE_ADDR (a chat page on the AI SDK's own client, examples/ai-sdk-chat)"
	else
		example="not served: it needs the AI SDK from npm (make ai-sdk-example, with Node and npm)"
	fi
fi

# With an .mcp.json, the banner lists the MCP servers' tools: wait for the
# worker to have started them (npx may first download a server).
mcp_config=${TOLLGATE_MCP_CONFIG:-}
[ -n "$mcp_config" ] || [ ! -f .mcp.json ] || mcp_config=.mcp.json
mcp_tools=""
wait_worker() {
	for i in $(seq 1200); do
		grep -q 'msg="worker started"' "$LOGS/worker.log" && return
		kill -0 "$worker_pid" 2>/dev/null || die "worker exited; see $LOGS/worker.log:
$(tail -n 20 "$LOGS/worker.log")"
		((i < 1200)) || die "worker not started after 120s; see $LOGS/worker.log"
		sleep 0.1
	done
}
if [ -n "$mcp_config" ] && [ "$mcp_config" != off ]; then
	say "starting the MCP servers of $mcp_config"
	wait_worker
	mcp_tools=$(sed -n 's/.*msg="MCP server started" mcpServer=\([^ ]*\) type=[^ ]* tools="\[\(.*\)\]".*/  MCP      \1: \2/p' "$LOGS/worker.log")
fi

# The Bash sandbox (docs/sandbox.md): whether the worker could start it.
sandbox="off (TOLLGATE_BASH_SANDBOX=preview runs a protected command in a sandbox first, and you approve what it changed)"
if [ "$TOLLGATE_BASH_SANDBOX" = preview ]; then
	wait_worker
	sandbox="preview: a protected Bash call runs in the sandbox first; approve applies what it changed"
	if why=$(grep -m1 'Bash sandbox cannot start' "$LOGS/worker.log"); then
		sandbox="CANNOT START here, so Bash asks as without it: ${why##*error=}"
	fi
fi

# The terminal client's default API is make dev's default address.
client=$BIN/tollgate
[ "$api" = 127.0.0.1:8080 ] || client="TOLLGATE_API=http://$api $client"

cat <<EOF

tollgate is running.
  API      http://$api
  Web UI   http://127.0.0.1:$UI_PORT
  AI SDK   $example
  Model    $model
  Approval a call waits $TOLLGATE_APPROVAL_TIMEOUT for a decision, then counts as declined (TOLLGATE_APPROVAL_TIMEOUT)
  Audit    $TOLLGATE_AUDIT_DB (GET http://$api/audit, http://$api/ledger)
  Notices  ${NOTICES:-$TOLLGATE_NOTIFY_URL} (each with signed approve and decline links)
  Sandbox  $sandbox
  Logs     $LOGS/ (${names[*]/%/.log})${mcp_tools:+
$mcp_tools}
  Try      curl -N http://$api/chat/stream -H 'Content-Type: application/json' -d '{"query":"tidy up the workspace"}'
  Decide   $client approvals --decide (what waits, anywhere; or curl http://$api/approvals), or http://$api/inbox
Ctrl-C stops everything.

EOF

# Run until Ctrl-C or until one of the processes exits. Ctrl-C reaches the
# children too, and they exit cleanly (0, 130 or 143); anything else is a
# failure worth showing.
set +e
wait -n
status=$?
case $status in 0 | 130 | 143) exit 0 ;; esac
for i in "${!pids[@]}"; do
	kill -0 "${pids[i]}" 2>/dev/null && continue
	say "${names[i]} failed; the end of $LOGS/${names[i]}.log:"
	tail -n 20 "$LOGS/${names[i]}.log" >&2
done
exit "$status"
