#!/bin/sh
# Creates (or upgrades) Temporal's two PostgreSQL databases, temporal and
# temporal_visibility, and creates tollgate's audit ledger database, tollgate. Safe to run again: existing databases are kept and
# only missing schema versions are applied. TEMPORAL_SCHEMA_DIR is where the
# server's postgresql/v12 schema files are: the admin-tools image's by
# default; the cluster test (cluster/) points it into the server's module.
set -eu
: "${POSTGRES_SEEDS:=postgresql}" "${DB_PORT:=5432}" "${POSTGRES_USER:=temporal}"
export SQL_PASSWORD="${POSTGRES_PWD:?set POSTGRES_PWD}"
schema=${TEMPORAL_SCHEMA_DIR:-/etc/temporal/schema/postgresql/v12}

echo "waiting for PostgreSQL at $POSTGRES_SEEDS:$DB_PORT"
until nc -z "$POSTGRES_SEEDS" "$DB_PORT"; do sleep 1; done

# sql DB ARGS...: temporal-sql-tool on database DB.
sql() {
	db=$1
	shift
	temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$DB_PORT" -u "$POSTGRES_USER" --db "$db" "$@"
}

for db in temporal temporal_visibility; do
	dir=temporal
	[ "$db" = temporal_visibility ] && dir=visibility
	sql "$db" create 2>/dev/null || echo "database $db exists"
	sql "$db" setup-schema -v 0.0
	sql "$db" update-schema -d "$schema/$dir/versioned"
done
# tollgate's audit ledger (TOLLGATE_AUDIT_DB) has a database of its own; the
# worker and the API make its table.
sql tollgate create 2>/dev/null || echo "database tollgate exists"
echo "Temporal's schema is ready"
