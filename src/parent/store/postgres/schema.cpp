// The PostgreSQL store's schema (see schema.h): version 8, created in one transaction under an
// advisory lock, with the kv store's usage triggers and its atomic operations as functions.
#include "parent/store/postgres/schema.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "parent/store/postgres/pg_support.h"

namespace basal::pg {
namespace {

// Version 6: the tables of the SQLite journal's schema 6, column for column (docs/journal.md),
// with PostgreSQL's types: bigint for INTEGER, bytea for what SQLite keeps as raw bytes (kv
// namespaces and keys, kept texts), text for JSON (kept as written, byte for byte). Ids come from
// their tables' sequences; activations' are reserved in blocks (pg_store.cpp). Every check,
// reference and index of schema 6 is here too.
const char* const kCreateV6 = R"sql(
CREATE TABLE basal.meta(
  key   text PRIMARY KEY,
  value text NOT NULL
);
CREATE TABLE basal.texts(
  hash text PRIMARY KEY CHECK (hash LIKE 'sha256:%'),
  body bytea NOT NULL
);
CREATE TABLE basal.approvals(
  id                 bigserial PRIMARY KEY,
  kind               text NOT NULL CHECK (kind IN ('flow', 'policy')),
  name               text NOT NULL,
  version            bigint NOT NULL CHECK (version >= 1),
  source_hash        text REFERENCES basal.texts(hash),
  manifest_text_hash text NOT NULL REFERENCES basal.texts(hash),
  manifest_hash      text NOT NULL,
  approver_uid       bigint NOT NULL,
  approver_name      text NOT NULL,
  approved_us        bigint NOT NULL,
  note               text NOT NULL,
  revoked_us         bigint,
  revoker_uid        bigint,
  revoker_name       text,
  revoke_note        text,
  UNIQUE (kind, name, version),
  CHECK ((kind = 'flow') = (source_hash IS NOT NULL))
);
CREATE TABLE basal.approval_events(
  seq         bigserial PRIMARY KEY,
  at_us       bigint NOT NULL,
  kind        text NOT NULL CHECK (kind IN ('approved', 'revoked')),
  approval_id bigint NOT NULL REFERENCES basal.approvals(id),
  actor_uid   bigint NOT NULL,
  actor_name  text NOT NULL,
  detail      text NOT NULL
);
CREATE TABLE basal.activations(
  id                 bigserial PRIMARY KEY,
  flow               text NOT NULL,
  source_hash        text NOT NULL,
  manifest_hash      text NOT NULL,
  input              text NOT NULL,
  start_us           bigint NOT NULL,
  end_us             bigint,
  outcome            text,
  result             text,
  error              text,
  cpu_us             bigint,
  owner_host         text NOT NULL DEFAULT '',
  owner_pid          bigint NOT NULL DEFAULT 0,
  owner_start_ticks  bigint NOT NULL DEFAULT 0,
  lease_until_us     bigint NOT NULL DEFAULT 0,
  logs_dropped       bigint NOT NULL DEFAULT 0,
  origin             text NOT NULL DEFAULT 'unrecorded'
                     CHECK (origin IN ('unrecorded', 'adhoc', 'approved', 'codemode')),
  approval_id        bigint REFERENCES basal.approvals(id),
  manifest_text_hash text,
  run_id             bigint,
  retry_from         bigint
);
CREATE INDEX activations_unfinished ON basal.activations(owner_host, owner_pid, owner_start_ticks)
  WHERE outcome IS NULL;
CREATE INDEX activations_by_run ON basal.activations(run_id) WHERE run_id IS NOT NULL;
CREATE TABLE basal.calls(
  seq           bigserial PRIMARY KEY,
  activation_id bigint NOT NULL REFERENCES basal.activations(id),
  call_id       bigint NOT NULL,
  name          text NOT NULL,
  args          text NOT NULL,
  verdict       text NOT NULL CHECK (verdict IN ('allow', 'deny', 'needs_approval', 'quota_exceeded')),
  rule          text NOT NULL,
  reason        text NOT NULL CHECK (reason <> ''),
  effect        text NOT NULL CHECK (effect IN ('pure', 'idempotent', 'external')),
  state         text NOT NULL CHECK (state IN ('decided', 'started', 'answered', 'abandoned', 'unknown')),
  result        text,
  error         text,
  start_us      bigint NOT NULL,
  end_us        bigint,
  args_digest   text,
  answer_seq    bigint,
  replay        text,
  UNIQUE (activation_id, call_id)
);
CREATE INDEX calls_by_activation ON basal.calls(activation_id, seq);
CREATE TABLE basal.kv(
  namespace bytea NOT NULL,
  key       bytea NOT NULL,
  value     text NOT NULL,
  PRIMARY KEY (namespace, key)
);
CREATE TABLE basal.kv_usage(
  namespace bytea PRIMARY KEY,
  bytes     bigint NOT NULL,
  keys      bigint NOT NULL
);
CREATE TABLE basal.runs(
  id                 bigserial PRIMARY KEY,
  flow               text NOT NULL,
  input              text NOT NULL,
  triggered_by       text NOT NULL,
  idempotency_key    text NOT NULL DEFAULT '',
  key_expires_us     bigint,
  state              text NOT NULL
                     CHECK (state IN ('queued', 'running', 'ended', 'interrupted', 'needs_reconciliation',
                                      'sleeping', 'waiting', 'retrying')),
  activation_id      bigint REFERENCES basal.activations(id),
  created_us         bigint NOT NULL,
  started_us         bigint,
  ended_us           bigint,
  outcome            text,
  error              text,
  state_detail       text,
  durable            smallint NOT NULL DEFAULT 0 CHECK (durable IN (0, 1)),
  approval_id        bigint REFERENCES basal.approvals(id),
  source_hash        text,
  manifest_hash      text,
  manifest_text_hash text,
  seed               text,
  clock_us           bigint,
  resumes            bigint NOT NULL DEFAULT 0,
  attempt            bigint NOT NULL DEFAULT 1,
  wake_us            bigint,
  waiting_for        text,
  waiting_key        text,
  CHECK ((state = 'ended') = (outcome IS NOT NULL)),
  CHECK (state NOT IN ('sleeping', 'retrying') OR wake_us IS NOT NULL),
  CHECK ((state = 'waiting') = (waiting_for IS NOT NULL)),
  CHECK (state <> 'queued' OR activation_id IS NULL OR durable = 1),
  CHECK (state <> 'running' OR activation_id IS NOT NULL)
);
CREATE INDEX runs_by_state ON basal.runs(state, id);
CREATE INDEX runs_by_flow ON basal.runs(flow, id);
CREATE UNIQUE INDEX runs_idempotency ON basal.runs(flow, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX runs_by_wake ON basal.runs(wake_us) WHERE wake_us IS NOT NULL;
CREATE INDEX runs_waiting ON basal.runs(flow, waiting_for, waiting_key) WHERE waiting_for IS NOT NULL;
CREATE TABLE basal.call_resolutions(
  seq           bigserial PRIMARY KEY,
  run_id        bigint NOT NULL REFERENCES basal.runs(id),
  activation_id bigint NOT NULL REFERENCES basal.activations(id),
  call_id       bigint NOT NULL,
  kind          text NOT NULL CHECK (kind IN ('result', 'error', 'retry')),
  value         text,
  actor_uid     bigint NOT NULL,
  actor_name    text NOT NULL,
  at_us         bigint NOT NULL,
  note          text NOT NULL DEFAULT ''
);
CREATE INDEX call_resolutions_by_run ON basal.call_resolutions(run_id, seq);
CREATE TABLE basal.run_events(
  id                   bigserial PRIMARY KEY,
  run_id               bigint REFERENCES basal.runs(id),
  flow                 text NOT NULL,
  name                 text NOT NULL,
  event_key            text NOT NULL DEFAULT '',
  payload              text NOT NULL,
  sender               text NOT NULL,
  received_us          bigint NOT NULL,
  expires_us           bigint NOT NULL,
  delivered_activation bigint,
  delivered_call       bigint,
  delivered_us         bigint,
  CHECK (run_id IS NOT NULL OR event_key <> '')
);
CREATE INDEX run_events_pending ON basal.run_events(run_id, name, id) WHERE delivered_us IS NULL;
CREATE INDEX run_events_by_key ON basal.run_events(flow, name, event_key, id)
  WHERE delivered_us IS NULL AND run_id IS NULL;
CREATE INDEX run_events_expiry ON basal.run_events(expires_us) WHERE delivered_us IS NULL;
CREATE TABLE basal.tokens(
  id           bigserial PRIMARY KEY,
  name         text NOT NULL CHECK (name <> ''),
  hash         text NOT NULL CHECK (hash <> ''),
  scopes       text NOT NULL,
  creator_uid  bigint NOT NULL,
  creator_name text NOT NULL,
  created_us   bigint NOT NULL,
  revoked_us   bigint,
  revoker_uid  bigint,
  revoker_name text
);
CREATE UNIQUE INDEX tokens_by_hash ON basal.tokens(hash);
CREATE UNIQUE INDEX tokens_unrevoked_name ON basal.tokens(name) WHERE revoked_us IS NULL;
CREATE TABLE basal.schedule_marks(
  trigger_name text PRIMARY KEY,
  fire_us      bigint NOT NULL
);

-- What each kv namespace holds (bytes of keys and values, keys), kept by a trigger on every write
-- path, as SQLite's kv_usage triggers do; kv.put's quota reads it.
CREATE FUNCTION basal.kv_usage_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    UPDATE basal.kv_usage SET bytes = bytes - octet_length(OLD.key) - octet_length(OLD.value), keys = keys - 1
      WHERE namespace = OLD.namespace;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO basal.kv_usage(namespace, bytes, keys) VALUES (NEW.namespace, octet_length(NEW.key) + octet_length(NEW.value), 1)
      ON CONFLICT (namespace) DO UPDATE SET bytes = basal.kv_usage.bytes + excluded.bytes, keys = basal.kv_usage.keys + 1;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER kv_usage_track AFTER INSERT OR UPDATE OR DELETE ON basal.kv
  FOR EACH ROW EXECUTE FUNCTION basal.kv_usage_track();

-- A kv value as jsonb, never raising (a raise would abort the whole batch): state 'ok', 'not_json'
-- (the database was changed by hand), or 'unrepresentable' (valid JSON that jsonb cannot hold: a
-- \u0000 in a string, a number past numeric's range).
CREATE FUNCTION basal.kv_json(t text, OUT v jsonb, OUT state text) LANGUAGE plpgsql AS $$
BEGIN
  v := t::jsonb;
  state := 'ok';
EXCEPTION
  WHEN invalid_text_representation THEN v := NULL; state := 'not_json';
  WHEN others THEN v := NULL; state := 'unrepresentable';
END $$;

-- kv writes: the kv lock first (held to the batch's commit, so writers of every host write one
-- batch at a time and no two can deadlock over two namespaces), then read, decide and write in
-- one statement: kv.cas ('cas'), kv.incr ('incr') and kv.put under its limits ('put'), as
-- KvStore's CompareAndSwap, Increment and PutWithin (store.h) define them. Limits are numeric so
-- that UINT64_MAX ("no limit") fits.
CREATE FUNCTION basal.kv_write(op text, ns bytea, k bytea, expected text, val text, incr bigint,
                               max_value_bytes numeric, quota_bytes numeric, quota_keys numeric,
                               OUT status text, OUT current text, OUT value_bytes bigint,
                               OUT usage_bytes bigint, OUT usage_keys bigint)
LANGUAGE plpgsql AS $$
DECLARE
  stored text;
  present boolean;
  cur jsonb;
  cur_state text;
  exp jsonb;
  exp_state text;
  n numeric;
  new_value text;
  total_bytes bigint;
  total_keys bigint;
  safe constant numeric := 9007199254740991;
BEGIN
  PERFORM pg_advisory_xact_lock(@KV_LOCK@);
  SELECT kv.value INTO stored FROM basal.kv WHERE kv.namespace = ns AND kv.key = k;
  present := FOUND;
  current := stored;
  IF present THEN
    SELECT j.v, j.state INTO cur, cur_state FROM basal.kv_json(stored) j;
  ELSE
    cur := 'null'::jsonb;
    cur_state := 'ok';
  END IF;
  IF op = 'cas' THEN
    IF cur_state = 'not_json' THEN status := 'not_json'; RETURN; END IF;
    IF expected IS NULL THEN
      exp := 'null'::jsonb;
      exp_state := 'ok';
    ELSE
      SELECT j.v, j.state INTO exp, exp_state FROM basal.kv_json(expected) j;
    END IF;
    -- JSON values compare by value; those jsonb cannot hold, by their text.
    IF NOT ((cur_state = 'ok' AND exp_state = 'ok' AND cur = exp)
            OR ((cur_state <> 'ok' OR exp_state <> 'ok') AND stored IS NOT DISTINCT FROM expected)) THEN
      status := 'mismatch';
      RETURN;
    END IF;
    new_value := val;
  ELSIF op = 'incr' THEN
    IF cur_state = 'not_json' THEN status := 'not_json'; RETURN; END IF;
    IF cur_state <> 'ok' THEN status := 'not_an_integer'; RETURN; END IF;
    IF jsonb_typeof(cur) = 'null' THEN
      n := 0;
    ELSIF jsonb_typeof(cur) = 'number' THEN
      n := cur::text::numeric;
      IF n <> trunc(n) THEN status := 'not_an_integer'; RETURN; END IF;
    ELSE
      status := 'not_an_integer';
      RETURN;
    END IF;
    IF abs(n) > safe THEN status := 'out_of_range'; RETURN; END IF;
    n := n + incr;
    IF abs(n) > safe THEN status := 'out_of_range'; RETURN; END IF;
    new_value := n::bigint::text;
  ELSE
    new_value := val;
  END IF;
  value_bytes := octet_length(new_value);
  IF value_bytes > max_value_bytes THEN status := 'value_too_large'; RETURN; END IF;
  SELECT u.bytes, u.keys INTO total_bytes, total_keys FROM basal.kv_usage u WHERE u.namespace = ns;
  IF NOT FOUND THEN
    total_bytes := 0;
    total_keys := 0;
  END IF;
  usage_bytes := total_bytes - least(total_bytes, CASE WHEN present THEN octet_length(k) + octet_length(stored) ELSE 0 END)
                 + octet_length(k) + value_bytes;
  usage_keys := total_keys + CASE WHEN present THEN 0 ELSE 1 END;
  IF usage_bytes > quota_bytes OR usage_keys > quota_keys THEN status := 'over_quota'; RETURN; END IF;
  INSERT INTO basal.kv(namespace, key, value) VALUES (ns, k, new_value)
    ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value;
  status := 'written';
  current := new_value;
END $$;

-- kv.put and kv.delete without limits, after the kv lock like every kv write.
CREATE FUNCTION basal.kv_put(ns bytea, k bytea, val text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(@KV_LOCK@);
  INSERT INTO basal.kv(namespace, key, value) VALUES (ns, k, val)
    ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value;
END $$;
CREATE FUNCTION basal.kv_delete(ns bytea, k bytea) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(@KV_LOCK@);
  DELETE FROM basal.kv WHERE namespace = ns AND key = k;
  RETURN FOUND;
END $$;

-- A write the store sends without waiting for its answer (a commit was in flight) must fail its
-- batch when it changed no row, as its synchronous form would have failed the call.
CREATE FUNCTION basal.expect_one(changed bigint, what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF changed <> 1 THEN
    RAISE EXCEPTION '%', what USING ERRCODE = 'no_data_found';
  END IF;
END $$;
)sql";

// Migrations from each older PostgreSQL schema version to the next, in order: {from, sql}. Version
// 6 is the first this backend has had (kCreateV6, which a new store is created with before the
// steps after it run); a new version appends its step here.
struct Migration {
  int from;
  const char* sql;
};
// 6 -> 7, as SQLite's version 7 (docs/journal.md):
// - the operator's kv writes (`basal kv put|rm`) in kv_audit; namespaces and keys are bytea, as in
//   basal.kv;
// - a webhook delivery makes one event, across restarts and hosts (run_events.delivery_id).
constexpr const char* kV7Sql = R"sql(
CREATE TABLE basal.kv_audit(
  seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at_us        bigint NOT NULL,
  actor_uid    bigint NOT NULL,
  actor_name   text NOT NULL,
  reason       text NOT NULL DEFAULT '',
  namespace    bytea NOT NULL,
  key          bytea NOT NULL,
  op           text NOT NULL CHECK (op IN ('put', 'delete')),
  value_sha256 text,
  value_bytes  bigint,
  existed      boolean NOT NULL,
  CHECK ((op = 'put') = (value_sha256 IS NOT NULL))
);
CREATE INDEX kv_audit_by_namespace ON basal.kv_audit(namespace, seq);
ALTER TABLE basal.run_events ADD COLUMN delivery_id text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX run_events_delivery ON basal.run_events(flow, delivery_id) WHERE delivery_id <> '';
)sql";
// 7 -> 8, PostgreSQL only (several hosts; SQLite serves one host): who holds a queued run.
// - basal.hosts: one row per host id (basal serve's host_id), its liveness by the server's clock,
//   renewed with the host's activation leases (RenewAndCheckLeases);
// - runs.queued_by: the host whose queue holds the run while it is queued (NULL: none, e.g. a
//   `basal run`'s or one queued before version 8); a host adopts the queued runs whose holder's
//   row lapsed, and a host with room takes those a live host cannot start (docs/postgres.md);
// - runs.held: a schedule's fire held back behind its open run (buffer_one): never handed over
//   while its holder lives.
constexpr const char* kV8Sql = R"sql(
CREATE TABLE basal.hosts(
  host_id        text PRIMARY KEY,
  lease_until_us bigint NOT NULL,
  seen_us        bigint NOT NULL
);
ALTER TABLE basal.runs ADD COLUMN queued_by text;
ALTER TABLE basal.runs ADD COLUMN held boolean NOT NULL DEFAULT false;
)sql";
const std::vector<Migration> kMigrations = {{6, kV7Sql}, {7, kV8Sql}};

Result<Rows> Query(PGconn* conn, const std::string& shown, const std::string& sql, const std::string& what) {
  PGresult* r = PQexec(conn, sql.c_str());
  const ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    const std::string why = ErrorText(r, conn);
    PQclear(r);
    return MakeError(ErrorCode::kDatabase, "store " + shown + ": " + what + ": " + why);
  }
  return Rows(r);
}

std::string NewJournalId() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::abort();  // no entropy source at all: nothing sensible to continue with
    }
    got += static_cast<size_t>(n);
  }
  std::string hex;
  char buf[3];
  for (unsigned char b : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    hex += buf;
  }
  return hex;
}

// What the database holds now: -1 no `basal` schema, 0 a `basal` schema without basal's meta
// table, else the schema version (a `basal` schema of another application: kDatabase).
Result<int> FoundVersion(PGconn* conn, const std::string& shown) {
  auto found = Query(conn, shown,
                     "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'basal'), "
                     "to_regclass('basal.meta') IS NOT NULL",
                     "cannot read what the database holds");
  if (!found) return found.error();
  if (found->Int(0, 0) == 0) return -1;
  if (!found->Bool(0, 1)) return 0;
  auto meta = Query(conn, shown,
                    "SELECT (SELECT value FROM basal.meta WHERE key = 'application'), "
                    "(SELECT value FROM basal.meta WHERE key = 'schema_version')",
                    "cannot read basal.meta");
  if (!meta) return meta.error();
  if (meta->Text(0, 0) != "basal") {
    return MakeError(ErrorCode::kDatabase, "store " + shown +
                                               ": its schema \"basal\" belongs to something else (basal.meta names no "
                                               "basal store); it was left unchanged: choose another database");
  }
  const int version = static_cast<int>(std::strtol(meta->Text(0, 1).c_str(), nullptr, 10));
  if (version < 1) {
    return MakeError(ErrorCode::kDatabase, "store " + shown + ": basal.meta has no schema version (\"" +
                                               meta->Text(0, 1) + "\"); it is damaged: restore it from a backup");
  }
  return version;
}

Result<void> CheckVersion(const std::string& shown, int version) {
  if (version > kSchemaVersion) {
    return MakeError(ErrorCode::kDatabase, "store " + shown + ": written by a newer basal (schema version " +
                                               std::to_string(version) + ", this basal knows up to " +
                                               std::to_string(kSchemaVersion) + "); upgrade basal or choose another --db");
  }
  return Ok();
}

// Inside the transaction that holds the schema lock: creates or migrates, as what it finds says.
Result<void> CreateOrMigrateLocked(PGconn* conn, const std::string& shown) {
  auto version = FoundVersion(conn, shown);
  if (!version) return version.error();
  if (*version == 0) {
    return MakeError(ErrorCode::kDatabase, "store " + shown +
                                               ": the database has a schema \"basal\" without basal's tables; it was "
                                               "left unchanged: drop it if it is empty, or choose another database");
  }
  if (auto ok = CheckVersion(shown, *version); !ok) return ok;
  if (*version < 0) {
    if (auto r = Query(conn, shown, "CREATE SCHEMA basal", "cannot create the schema \"basal\" (the role needs CREATE "
                                                           "on the database, or an operator creates the schema for it)");
        !r)
      return r.error();
  }
  if (*version < 0) {
    std::string ddl = kCreateV6;
    const std::string key = std::to_string(kKvLockKey);
    for (size_t at = ddl.find("@KV_LOCK@"); at != std::string::npos; at = ddl.find("@KV_LOCK@", at))
      ddl.replace(at, 9, key);
    if (auto r = Query(conn, shown, ddl, "cannot create basal's tables"); !r) return r.error();
    // Version 6 as created, then the migrations after it, as an older database takes them.
    const std::string meta =
        "INSERT INTO basal.meta(key, value) VALUES ('application', 'basal'), ('schema_version', '6'), ('journal_id', '" +
        NewJournalId() + "')";
    if (auto r = Query(conn, shown, meta, "cannot record the schema version"); !r) return r.error();
    *version = 6;
  }
  for (const Migration& m : kMigrations) {
    if (m.from < *version) continue;
    if (auto r = Query(conn, shown, m.sql, "cannot migrate from schema version " + std::to_string(m.from)); !r)
      return r.error();
  }
  if (*version < kSchemaVersion) {
    if (auto r = Query(conn, shown,
                       "UPDATE basal.meta SET value = '" + std::to_string(kSchemaVersion) + "' WHERE key = 'schema_version'",
                       "cannot record the schema version");
        !r)
      return r.error();
  }
  return Ok();
}

}  // namespace

Result<void> PrepareSchema(PGconn* conn, const std::string& shown, bool read_only) {
  auto version = FoundVersion(conn, shown);
  if (!version) return version.error();
  if (*version == kSchemaVersion) return Ok();
  if (auto ok = CheckVersion(shown, *version); !ok) return ok;
  if (read_only) {
    if (*version < 0) return MakeError(ErrorCode::kNotFound, "store " + shown + ": no basal store there yet");
    return MakeError(ErrorCode::kDatabase, "store " + shown + ": schema version " + std::to_string(*version) +
                                               " needs a migration, which a reader never makes: open it once with a "
                                               "command that writes (basal serve, basal run)");
  }
  // One process creates or migrates; the others wait for the lock and find it done.
  if (auto r = Query(conn, shown, "BEGIN", "cannot start creating the schema"); !r) return r.error();
  Result<void> made = [&]() -> Result<void> {
    if (auto r = Query(conn, shown, "SELECT pg_advisory_xact_lock(" + std::to_string(kSchemaLockKey) + ")",
                       "cannot take the schema lock");
        !r)
      return r.error();
    return CreateOrMigrateLocked(conn, shown);
  }();
  if (made) {
    if (auto r = Query(conn, shown, "COMMIT", "cannot commit the schema"); !r) made = r.error();
  }
  if (!made) (void)Query(conn, shown, "ROLLBACK", "cannot roll back");
  return made;
}

Result<std::string> ReadJournalId(PGconn* conn, const std::string& shown) {
  auto rows = Query(conn, shown, "SELECT value FROM basal.meta WHERE key = 'journal_id'", "cannot read the journal id");
  if (!rows) return rows.error();
  if (rows->rows() != 1 || rows->Text(0, 0).empty()) {
    return MakeError(ErrorCode::kDatabase,
                     "store " + shown + ": basal.meta lacks the journal id: it was changed by hand; restore it from a backup");
  }
  return rows->Text(0, 0);
}

}  // namespace basal::pg
