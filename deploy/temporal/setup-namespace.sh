#!/bin/sh
# Waits until the Temporal cluster is healthy, then creates tollgate's
# namespace and custom search attributes when they are missing. Safe to run
# again. The worker would register the attributes itself; doing it here
# means no worker needs the operator rights to do so.
set -eu
: "${TEMPORAL_ADDRESS:=temporal:7233}" "${TEMPORAL_NAMESPACE:=default}" "${TEMPORAL_RETENTION:=168h}"
cli() { temporal --address "$TEMPORAL_ADDRESS" "$@"; }

tries=0
until cli operator cluster health >/dev/null 2>&1; do
	tries=$((tries + 1))
	[ "$tries" -lt 120 ] || { echo "Temporal at $TEMPORAL_ADDRESS is not healthy after 120s" >&2; exit 1; }
	sleep 1
done
echo "Temporal at $TEMPORAL_ADDRESS is healthy"

cli operator namespace describe --namespace "$TEMPORAL_NAMESPACE" >/dev/null 2>&1 ||
	cli operator namespace create --namespace "$TEMPORAL_NAMESPACE" --retention "$TEMPORAL_RETENTION"

# A new namespace reaches every frontend within seconds, not at once.
tries=0
until attributes=$(cli operator search-attribute list --namespace "$TEMPORAL_NAMESPACE" 2>&1); do
	tries=$((tries + 1))
	[ "$tries" -lt 60 ] || { echo "$attributes" >&2; exit 1; }
	sleep 1
done
created=0
for spec in TollgateConversationId:Keyword TollgatePendingApprovals:KeywordList TollgateStatus:Keyword; do
	name=${spec%%:*} type=${spec#*:}
	if printf '%s\n' "$attributes" | grep -qw "$name"; then
		echo "search attribute $name exists"
	else
		cli operator search-attribute create --namespace "$TEMPORAL_NAMESPACE" --name "$name" --type "$type"
		created=1
	fi
done
# On SQL visibility a custom search attribute is a mapping in the
# namespace's record, which each service reads through its namespace cache
# (refreshed every system.namespaceCacheRefreshInterval, 2s by default).
# Until the history service has it, a workflow task that sets the attribute
# fails with BadSearchAttributes, and the message that started the turn
# answers 500: nothing that uses the namespace starts before then.
if [ "$created" = 1 ]; then
	sleep "${TEMPORAL_CACHE_REFRESH_WAIT:-5}"
fi
echo "namespace $TEMPORAL_NAMESPACE is ready for tollgate"
