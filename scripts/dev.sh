#!/usr/bin/env bash
# make dev: run tollgate on this machine. A tuned Temporal dev server with its
# Web UI, the scripted model when no OPENAI_API_KEY is set, the worker and the
# API. Ctrl-C stops them all. Logs go to $TOLLGATE_STATE_DIR/logs.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE_DIR=${TOLLGATE_STATE_DIR:-.tollgate}
LOGS=$STATE_DIR/logs
TEMPORAL_PORT=7233
UI_PORT=8233
MODEL_ADDR=127.0.0.1:8090
export TEMPORAL_ADDRESS=127.0.0.1:$TEMPORAL_PORT
export TEMPORAL_NAMESPACE=${TEMPORAL_NAMESPACE:-default}
export HTTP_ADDR=${HTTP_ADDR:-127.0.0.1:8080}
export TOLLGATE_WORKSPACE=${TOLLGATE_WORKSPACE:-./workspace}
export TOLLGATE_AGENTS_DIR=${TOLLGATE_AGENTS_DIR:-./agents}
# Payloads too large for history, shared by the worker and the API.
export TOLLGATE_PAYLOAD_DIR=${TOLLGATE_PAYLOAD_DIR:-$STATE_DIR/payloads}
# The audit ledger, a SQLite file the worker writes and the API reads.
export TOLLGATE_AUDIT_DB=${TOLLGATE_AUDIT_DB:-$STATE_DIR/audit.db}
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
export TOLLGATE_CODEC_ORIGINS=${TOLLGATE_CODEC_ORIGINS:-http://127.0.0.1:8233,http://localhost:8233}

say() { printf 'dev: %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }

# ---- build ----------------------------------------------------------------
if [ ! -x bin/temporal ]; then
	say "building the Temporal CLI into bin/ (about six minutes the first time)"
	make temporal
fi
go build -o bin/ ./worker ./api ./cmd/scripted-model
mkdir -p "$LOGS"

# ---- process supervision --------------------------------------------------
pids=() names=()
cleanup() {
	local rc=$?
	trap - INT TERM EXIT
	set +e
	((${#pids[@]})) || exit $rc
	say "stopping ${names[*]}"
	# Reverse order: the API and worker leave before the server they use.
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
	for _ in $(seq 100); do
		alive=0
		for pid in "${pids[@]}"; do if kill -0 "$pid" 2>/dev/null; then alive=1; fi; done
		((alive)) || exit $rc
		sleep 0.1
	done
	say "killing what did not stop within 10s"
	for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
	exit $rc
}
trap cleanup INT TERM EXIT

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
for p in "${ports[@]}"; do
	port_free "${p%%:*}" || die "port ${p%%:*}, for ${p#*:}, is in use: is another tollgate running?"
done
namespace_flag=()
[ "$TEMPORAL_NAMESPACE" = default ] || namespace_flag=(--namespace "$TEMPORAL_NAMESPACE")
# Tuned for one machine, as internal/devserver tunes the tests' servers
# (TestMakeDevTunesItsServerAlike keeps the two alike).
start temporal bin/temporal server start-dev --ip 127.0.0.1 --port $TEMPORAL_PORT \
	--ui-port $UI_PORT --log-level warn \
	--ui-codec-endpoint "http://${HTTP_ADDR/#:/127.0.0.1:}/codec" \
	--db-filename "$STATE_DIR/temporal.db" "${namespace_flag[@]}" \
	--sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal \
	--dynamic-config-value history.transferProcessorMaxPollRPS=1000 \
	--dynamic-config-value matching.numTaskqueueReadPartitions=1 \
	--dynamic-config-value matching.numTaskqueueWritePartitions=1 \
	--dynamic-config-value system.enableActivityEagerExecution=true
wait_port temporal "$TEMPORAL_ADDRESS"
for i in $(seq 300); do
	bin/temporal operator namespace describe --address "$TEMPORAL_ADDRESS" \
		--namespace "$TEMPORAL_NAMESPACE" >/dev/null 2>&1 && break
	((i < 300)) || die "Temporal does not serve namespace $TEMPORAL_NAMESPACE after 30s; see $LOGS/temporal.log"
	sleep 0.1
done

# ---- model ----------------------------------------------------------------
# The scripted model's process runs when it is the model or the notices'
# hook.
if [ -z "${OPENAI_API_KEY:-}" ] || [ -n "$NOTICES" ]; then
	start scripted-model bin/scripted-model -addr $MODEL_ADDR ${NOTICES:+-notices "$NOTICES"}
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

start worker bin/worker
worker_pid=${pids[-1]}
start api bin/api
api=$HTTP_ADDR
[ "${api%%:*}" ] || api=127.0.0.1$api
wait_port api "$api"

# With an .mcp.json, the banner lists the MCP servers' tools: wait for the
# worker to have started them (npx may first download a server).
mcp_config=${TOLLGATE_MCP_CONFIG:-}
[ -n "$mcp_config" ] || [ ! -f .mcp.json ] || mcp_config=.mcp.json
mcp_tools=""
if [ -n "$mcp_config" ] && [ "$mcp_config" != off ]; then
	say "starting the MCP servers of $mcp_config"
	for i in $(seq 1200); do
		grep -q 'msg="worker started"' "$LOGS/worker.log" && break
		kill -0 "$worker_pid" 2>/dev/null || die "worker exited; see $LOGS/worker.log:
$(tail -n 20 "$LOGS/worker.log")"
		((i < 1200)) || die "worker not started after 120s; see $LOGS/worker.log"
		sleep 0.1
	done
	mcp_tools=$(sed -n 's/.*msg="MCP server started" mcpServer=\([^ ]*\) type=[^ ]* tools="\[\(.*\)\]".*/  MCP      \1: \2/p' "$LOGS/worker.log")
fi

cat <<EOF

tollgate is running.
  API      http://$api
  Web UI   http://127.0.0.1:$UI_PORT
  Model    $model
  Approval a call waits $TOLLGATE_APPROVAL_TIMEOUT for a decision, then counts as declined (TOLLGATE_APPROVAL_TIMEOUT)
  Audit    $TOLLGATE_AUDIT_DB (GET http://$api/audit, http://$api/ledger)
  Notices  ${NOTICES:-$TOLLGATE_NOTIFY_URL} (each with signed approve and decline links)
  Logs     $LOGS/ (${names[*]/%/.log})${mcp_tools:+
$mcp_tools}
  Try      curl -N http://$api/chat/stream -H 'Content-Type: application/json' -d '{"query":"tidy up the workspace"}'
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
