// Schema version 10, creation, and the migrations from versions 1 to 9 (see schema.h, docs/journal.md).
#include "parent/store/sqlite/schema.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "parent/store/sqlite/sqlite_support.h"

namespace basal::sqlite {
namespace {

// The calls table of version 2, under a given name (the migration builds it beside the old one).
// verdict, effect and state hold the names of store.h's enums; end_us is NULL until it ends.
std::string CallsTableSql(std::string_view name) {
  return "CREATE TABLE " + std::string(name) + R"sql((
  seq           INTEGER PRIMARY KEY,
  activation_id INTEGER NOT NULL REFERENCES activations(id),
  call_id       INTEGER NOT NULL,
  name          TEXT NOT NULL,
  args          TEXT NOT NULL,
  verdict       TEXT NOT NULL CHECK (verdict IN ('allow', 'deny', 'needs_approval', 'quota_exceeded')),
  rule          TEXT NOT NULL,
  reason        TEXT NOT NULL CHECK (reason <> ''),
  effect        TEXT NOT NULL CHECK (effect IN ('pure', 'idempotent', 'external')),
  state         TEXT NOT NULL CHECK (state IN ('decided', 'started', 'answered', 'abandoned', 'unknown')),
  result        TEXT,
  error         TEXT,
  start_us      INTEGER NOT NULL,
  end_us        INTEGER,
  UNIQUE (activation_id, call_id)
);
)sql";
}

// Owner columns come last so a migrated table (ALTER TABLE ADD COLUMN) and a new one match.
constexpr const char* kCreateActivationsAndKv = R"sql(
CREATE TABLE activations(
  id                INTEGER PRIMARY KEY,
  flow              TEXT NOT NULL,
  source_hash       TEXT NOT NULL,
  manifest_hash     TEXT NOT NULL,
  input             TEXT NOT NULL,
  start_us          INTEGER NOT NULL,
  end_us            INTEGER,
  outcome           TEXT,
  result            TEXT,
  error             TEXT,
  cpu_us            INTEGER,
  owner_host        TEXT NOT NULL DEFAULT '',
  owner_pid         INTEGER NOT NULL DEFAULT 0,
  owner_start_ticks INTEGER NOT NULL DEFAULT 0,
  lease_until_us    INTEGER NOT NULL DEFAULT 0,
  logs_dropped      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE kv(
  namespace TEXT NOT NULL,
  key       TEXT NOT NULL,
  value     TEXT NOT NULL,
  PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
)sql";

// Version 3: an activation's calls in record order straight from an index (the reader's query; a
// sort of a large activation's rows spilled to a temporary file and took seconds; dropped in
// version 10, whose reader sorts in memory), and what each
// kv namespace holds (bytes of keys and values, keys), kept by triggers so
// that every write path keeps it true; kv.put's quota reads it instead of scanning the namespace.
constexpr const char* kCreateKvUsage = R"sql(
CREATE INDEX calls_by_activation ON calls(activation_id, seq);
CREATE TABLE kv_usage(
  namespace TEXT PRIMARY KEY,
  bytes     INTEGER NOT NULL,
  keys      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER kv_usage_insert AFTER INSERT ON kv BEGIN
  INSERT INTO kv_usage(namespace, bytes, keys)
    VALUES(new.namespace, length(CAST(new.key AS BLOB)) + length(CAST(new.value AS BLOB)), 1)
    ON CONFLICT(namespace) DO UPDATE SET bytes = bytes + excluded.bytes, keys = keys + 1;
END;
CREATE TRIGGER kv_usage_update AFTER UPDATE ON kv BEGIN
  UPDATE kv_usage SET bytes = bytes - length(CAST(old.key AS BLOB)) - length(CAST(old.value AS BLOB)), keys = keys - 1
    WHERE namespace = old.namespace;
  INSERT INTO kv_usage(namespace, bytes, keys)
    VALUES(new.namespace, length(CAST(new.key AS BLOB)) + length(CAST(new.value AS BLOB)), 1)
    ON CONFLICT(namespace) DO UPDATE SET bytes = bytes + excluded.bytes, keys = keys + 1;
END;
CREATE TRIGGER kv_usage_delete AFTER DELETE ON kv BEGIN
  UPDATE kv_usage SET bytes = bytes - length(CAST(old.key AS BLOB)) - length(CAST(old.value AS BLOB)), keys = keys - 1
    WHERE namespace = old.namespace;
END;
)sql";

// Version 4 (from 3, and the last step of creation): what ran, exactly. The texts of flow sources
// and manifests, each kept once by its SHA-256 (content-addressed); the operator's approved
// versions of flows and codemode policies, bound to those hashes; the approvals' own journal (who
// approved or revoked what, when); and each activation's origin, approved version and manifest
// text. Added with ALTER TABLE in every path so a created and a migrated table have one column order.
constexpr const char* kV4Sql = R"sql(
CREATE TABLE texts(
  hash TEXT PRIMARY KEY CHECK (hash LIKE 'sha256:%'),
  body BLOB NOT NULL
);
CREATE TABLE approvals(
  id                 INTEGER PRIMARY KEY,
  kind               TEXT NOT NULL CHECK (kind IN ('flow', 'policy')),
  name               TEXT NOT NULL,
  version            INTEGER NOT NULL CHECK (version >= 1),
  source_hash        TEXT REFERENCES texts(hash),
  manifest_text_hash TEXT NOT NULL REFERENCES texts(hash),
  manifest_hash      TEXT NOT NULL,
  approver_uid       INTEGER NOT NULL,
  approver_name      TEXT NOT NULL,
  approved_us        INTEGER NOT NULL,
  note               TEXT NOT NULL,
  revoked_us         INTEGER,
  revoker_uid        INTEGER,
  revoker_name       TEXT,
  revoke_note        TEXT,
  UNIQUE (kind, name, version),
  CHECK ((kind = 'flow') = (source_hash IS NOT NULL))
);
CREATE TABLE approval_events(
  seq         INTEGER PRIMARY KEY,
  at_us       INTEGER NOT NULL,
  kind        TEXT NOT NULL CHECK (kind IN ('approved', 'revoked')),
  approval_id INTEGER NOT NULL REFERENCES approvals(id),
  actor_uid   INTEGER NOT NULL,
  actor_name  TEXT NOT NULL,
  detail      TEXT NOT NULL
);
ALTER TABLE activations ADD COLUMN origin TEXT NOT NULL DEFAULT 'unrecorded'
  CHECK (origin IN ('unrecorded', 'adhoc', 'approved', 'codemode'));
ALTER TABLE activations ADD COLUMN approval_id INTEGER REFERENCES approvals(id);
ALTER TABLE activations ADD COLUMN manifest_text_hash TEXT;
)sql";

// Version 5 (from 4, and the last step of creation): what `basal serve` keeps beside the journal.
// Runs: accepted requests to run an approved flow, queued before the daemon answers 202; the
// state index serves the daemon's restart (queued and running runs) and its counts, the flow index
// a flow's listing, and the partial unique index makes an idempotency key name one run per flow
// (an expired key is cleared when reused, so the index only holds keys still in force or never
// reused). Tokens: API tokens by the hash of the token only; a name is unique among unrevoked
// tokens. Schedule marks: per schedule trigger, the last fire handled. Column names avoid the
// SQL keyword "trigger" so hand-written queries need no quoting.
constexpr const char* kV5Sql = R"sql(
CREATE TABLE runs(
  id              INTEGER PRIMARY KEY,
  flow            TEXT NOT NULL,
  input           TEXT NOT NULL,
  triggered_by    TEXT NOT NULL,
  idempotency_key TEXT NOT NULL DEFAULT '',
  key_expires_us  INTEGER,
  state           TEXT NOT NULL CHECK (state IN ('queued', 'running', 'ended')),
  activation_id   INTEGER REFERENCES activations(id),
  created_us      INTEGER NOT NULL,
  started_us      INTEGER,
  ended_us        INTEGER,
  outcome         TEXT,
  error           TEXT,
  state_detail    TEXT,
  CHECK ((state = 'ended') = (outcome IS NOT NULL)),
  CHECK (state <> 'queued' OR activation_id IS NULL),
  CHECK (state <> 'running' OR activation_id IS NOT NULL)
);
CREATE INDEX runs_by_state ON runs(state, id);
CREATE INDEX runs_by_flow ON runs(flow, id);
CREATE UNIQUE INDEX runs_idempotency ON runs(flow, idempotency_key) WHERE idempotency_key <> '';
CREATE TABLE tokens(
  id           INTEGER PRIMARY KEY,
  name         TEXT NOT NULL CHECK (name <> ''),
  hash         TEXT NOT NULL CHECK (hash <> ''),
  scopes       TEXT NOT NULL,
  creator_uid  INTEGER NOT NULL,
  creator_name TEXT NOT NULL,
  created_us   INTEGER NOT NULL,
  revoked_us   INTEGER,
  revoker_uid  INTEGER,
  revoker_name TEXT
);
CREATE UNIQUE INDEX tokens_by_hash ON tokens(hash);
CREATE UNIQUE INDEX tokens_unrevoked_name ON tokens(name) WHERE revoked_us IS NULL;
CREATE TABLE schedule_marks(
  trigger_name TEXT PRIMARY KEY,
  fire_us      INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

// Version 6 (from 5, and the last step of creation): runs that outlive their host (docs/durable.md).
// The runs table is rebuilt for its wider states (a CHECK cannot be altered) and what a run is bound
// to; an activation names its run (and keeps no input of its own then: the run holds it; no foreign
// key, which would cost a lookup per activation); a call keeps what a replay needs; the operator's
// decisions about calls in doubt are kept.
constexpr const char* kV6Sql = R"sql(
CREATE TABLE runs_v6(
  id                 INTEGER PRIMARY KEY,
  flow               TEXT NOT NULL,
  input              TEXT NOT NULL,
  triggered_by       TEXT NOT NULL,
  idempotency_key    TEXT NOT NULL DEFAULT '',
  key_expires_us     INTEGER,
  state              TEXT NOT NULL CHECK (state IN ('queued', 'running', 'ended', 'interrupted', 'needs_reconciliation',
                                                   'sleeping', 'waiting', 'retrying')),
  activation_id      INTEGER REFERENCES activations(id),
  created_us         INTEGER NOT NULL,
  started_us         INTEGER,
  ended_us           INTEGER,
  outcome            TEXT,
  error              TEXT,
  state_detail       TEXT,
  durable            INTEGER NOT NULL DEFAULT 0 CHECK (durable IN (0, 1)),
  approval_id        INTEGER REFERENCES approvals(id),
  source_hash        TEXT,
  manifest_hash      TEXT,
  manifest_text_hash TEXT,
  seed               TEXT,
  clock_us           INTEGER,
  resumes            INTEGER NOT NULL DEFAULT 0,
  attempt            INTEGER NOT NULL DEFAULT 1,
  wake_us            INTEGER,
  waiting_for        TEXT,
  waiting_key        TEXT,
  CHECK ((state = 'ended') = (outcome IS NOT NULL)),
  CHECK ((state IN ('sleeping', 'retrying')) <= (wake_us IS NOT NULL)),
  CHECK ((state = 'waiting') = (waiting_for IS NOT NULL)),
  CHECK (state <> 'queued' OR activation_id IS NULL OR durable = 1),
  CHECK (state <> 'running' OR activation_id IS NOT NULL)
);
INSERT INTO runs_v6(id, flow, input, triggered_by, idempotency_key, key_expires_us, state, activation_id, created_us,
                    started_us, ended_us, outcome, error, state_detail)
  SELECT id, flow, input, triggered_by, idempotency_key, key_expires_us, state, activation_id, created_us, started_us,
         ended_us, outcome, error, state_detail FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v6 RENAME TO runs;
CREATE INDEX runs_by_state ON runs(state, id);
CREATE INDEX runs_by_flow ON runs(flow, id);
CREATE UNIQUE INDEX runs_idempotency ON runs(flow, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX runs_by_wake ON runs(wake_us) WHERE wake_us IS NOT NULL;
CREATE INDEX runs_waiting ON runs(flow, waiting_for, waiting_key) WHERE waiting_for IS NOT NULL;
ALTER TABLE activations ADD COLUMN run_id INTEGER;
ALTER TABLE activations ADD COLUMN retry_from INTEGER;
CREATE INDEX activations_by_run ON activations(run_id) WHERE run_id IS NOT NULL;
ALTER TABLE calls ADD COLUMN args_digest TEXT;
ALTER TABLE calls ADD COLUMN answer_seq INTEGER;
ALTER TABLE calls ADD COLUMN replay TEXT;
CREATE TABLE call_resolutions(
  seq           INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs(id),
  activation_id INTEGER NOT NULL REFERENCES activations(id),
  call_id       INTEGER NOT NULL,
  kind          TEXT NOT NULL CHECK (kind IN ('result', 'error', 'retry')),
  value         TEXT,
  actor_uid     INTEGER NOT NULL,
  actor_name    TEXT NOT NULL,
  at_us         INTEGER NOT NULL,
  note          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX call_resolutions_by_run ON call_resolutions(run_id, seq);
CREATE TABLE run_events(
  id                   INTEGER PRIMARY KEY,
  run_id               INTEGER REFERENCES runs(id),
  flow                 TEXT NOT NULL,
  name                 TEXT NOT NULL,
  event_key            TEXT NOT NULL DEFAULT '',
  payload              TEXT NOT NULL,
  sender               TEXT NOT NULL,
  received_us          INTEGER NOT NULL,
  expires_us           INTEGER NOT NULL,
  delivered_activation INTEGER,
  delivered_call       INTEGER,
  delivered_us         INTEGER,
  CHECK (run_id IS NOT NULL OR event_key <> '')
);
CREATE INDEX run_events_pending ON run_events(run_id, name, id) WHERE delivered_us IS NULL;
CREATE INDEX run_events_by_key ON run_events(flow, name, event_key, id) WHERE delivered_us IS NULL AND run_id IS NULL;
CREATE INDEX run_events_expiry ON run_events(expires_us) WHERE delivered_us IS NULL;
)sql";

// Version 7 (from 6, and the last step of creation):
// - the operator's kv writes (`basal kv put|rm`), each with who made it, when, why, and the digest
//   of the value (never the value: it is in kv);
// - a webhook delivery makes one event, across restarts and hosts: the sender's delivery id is kept
//   with its event, unique per flow.
constexpr const char* kV7Sql = R"sql(
CREATE TABLE kv_audit(
  seq          INTEGER PRIMARY KEY,
  at_us        INTEGER NOT NULL,
  actor_uid    INTEGER NOT NULL,
  actor_name   TEXT NOT NULL,
  reason       TEXT NOT NULL DEFAULT '',
  namespace    TEXT NOT NULL,
  key          TEXT NOT NULL,
  op           TEXT NOT NULL CHECK (op IN ('put', 'delete')),
  value_sha256 TEXT,
  value_bytes  INTEGER,
  existed      INTEGER NOT NULL CHECK (existed IN (0, 1)),
  CHECK ((op = 'put') = (value_sha256 IS NOT NULL))
);
CREATE INDEX kv_audit_by_namespace ON kv_audit(namespace, seq);
ALTER TABLE run_events ADD COLUMN delivery_id TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX run_events_delivery ON run_events(flow, delivery_id) WHERE delivery_id <> '';
)sql";

// Version 8 (from 7, and the last step of creation): the runs' state index keeps only the runs
// that have not ended. Every reader of it asks for a state other than 'ended' (the restart's queued,
// running and interrupted runs, the parked counts, a listing by a live state), and a run that ended
// no longer changes it: its end commits one index page fewer (docs/performance.md). Written as an OR
// of equalities, not as `state <> 'ended'` or an IN list: SQLite uses a partial index only for a
// query whose terms imply its WHERE, and it finds `state = 'queued'` (or `state = ?` bound to it) in
// an OR of equalities, not in an inequality. A new run state must be added here.
constexpr const char* kV8Sql = R"sql(
DROP INDEX runs_by_state;
CREATE INDEX runs_unended ON runs(state, id) WHERE state = 'queued' OR state = 'running' OR state = 'interrupted'
  OR state = 'needs_reconciliation' OR state = 'sleeping' OR state = 'waiting' OR state = 'retrying';
)sql";

// Version 9 (from 8, and the last step of creation): the CHECKs that name a column's allowed texts
// are written as ORs of equalities, not IN lists. SQLite codes `x IN ('a', 'b', 'c')` over more than
// two constants as an ephemeral table, built (opened, filled, closed) each time the CHECK runs: at
// every INSERT of an activation, a call or a run, and at every change of a call's or a run's state
// (docs/performance.md). The same texts are allowed, NULL is treated the same (an OR of
// comparisons with NULL is NULL, which a CHECK lets through, as it does IN's), and the NOT NULLs
// stay. A CHECK cannot be altered, so the three tables are rebuilt with every row, id and index
// kept, under the write lock and with foreign keys off (InitializeForWriting): other tables refer
// to them by name, which is the new table's once it is renamed. IN lists of one or two constants
// are coded as comparisons already and are left as they are.
constexpr const char* kV9Sql = R"sql(
CREATE TABLE activations_v9(
  id                 INTEGER PRIMARY KEY,
  flow               TEXT NOT NULL,
  source_hash        TEXT NOT NULL,
  manifest_hash      TEXT NOT NULL,
  input              TEXT NOT NULL,
  start_us           INTEGER NOT NULL,
  end_us             INTEGER,
  outcome            TEXT,
  result             TEXT,
  error              TEXT,
  cpu_us             INTEGER,
  owner_host         TEXT NOT NULL DEFAULT '',
  owner_pid          INTEGER NOT NULL DEFAULT 0,
  owner_start_ticks  INTEGER NOT NULL DEFAULT 0,
  lease_until_us     INTEGER NOT NULL DEFAULT 0,
  logs_dropped       INTEGER NOT NULL DEFAULT 0,
  origin             TEXT NOT NULL DEFAULT 'unrecorded'
    CHECK (origin = 'unrecorded' OR origin = 'adhoc' OR origin = 'approved' OR origin = 'codemode'),
  approval_id        INTEGER REFERENCES approvals(id),
  manifest_text_hash TEXT,
  run_id             INTEGER,
  retry_from         INTEGER
);
INSERT INTO activations_v9(id, flow, source_hash, manifest_hash, input, start_us, end_us, outcome, result, error,
                           cpu_us, owner_host, owner_pid, owner_start_ticks, lease_until_us, logs_dropped, origin,
                           approval_id, manifest_text_hash, run_id, retry_from)
  SELECT id, flow, source_hash, manifest_hash, input, start_us, end_us, outcome, result, error, cpu_us, owner_host,
         owner_pid, owner_start_ticks, lease_until_us, logs_dropped, origin, approval_id, manifest_text_hash, run_id,
         retry_from FROM activations;
DROP TABLE activations;
ALTER TABLE activations_v9 RENAME TO activations;
CREATE INDEX activations_unfinished ON activations(owner_host, owner_pid, owner_start_ticks)
  WHERE outcome IS NULL;
CREATE INDEX activations_by_run ON activations(run_id) WHERE run_id IS NOT NULL;
CREATE TABLE calls_v9(
  seq           INTEGER PRIMARY KEY,
  activation_id INTEGER NOT NULL REFERENCES activations(id),
  call_id       INTEGER NOT NULL,
  name          TEXT NOT NULL,
  args          TEXT NOT NULL,
  verdict       TEXT NOT NULL
    CHECK (verdict = 'allow' OR verdict = 'deny' OR verdict = 'needs_approval' OR verdict = 'quota_exceeded'),
  rule          TEXT NOT NULL,
  reason        TEXT NOT NULL CHECK (reason <> ''),
  effect        TEXT NOT NULL CHECK (effect = 'pure' OR effect = 'idempotent' OR effect = 'external'),
  state         TEXT NOT NULL CHECK (state = 'decided' OR state = 'started' OR state = 'answered' OR
                                     state = 'abandoned' OR state = 'unknown'),
  result        TEXT,
  error         TEXT,
  start_us      INTEGER NOT NULL,
  end_us        INTEGER,
  args_digest   TEXT,
  answer_seq    INTEGER,
  replay        TEXT,
  UNIQUE (activation_id, call_id)
);
INSERT INTO calls_v9(seq, activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error,
                     start_us, end_us, args_digest, answer_seq, replay)
  SELECT seq, activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, start_us,
         end_us, args_digest, answer_seq, replay FROM calls;
DROP TABLE calls;
ALTER TABLE calls_v9 RENAME TO calls;
CREATE INDEX calls_by_activation ON calls(activation_id, seq);
CREATE TABLE runs_v9(
  id                 INTEGER PRIMARY KEY,
  flow               TEXT NOT NULL,
  input              TEXT NOT NULL,
  triggered_by       TEXT NOT NULL,
  idempotency_key    TEXT NOT NULL DEFAULT '',
  key_expires_us     INTEGER,
  state              TEXT NOT NULL CHECK (state = 'queued' OR state = 'running' OR state = 'ended' OR
                                          state = 'interrupted' OR state = 'needs_reconciliation' OR
                                          state = 'sleeping' OR state = 'waiting' OR state = 'retrying'),
  activation_id      INTEGER REFERENCES activations(id),
  created_us         INTEGER NOT NULL,
  started_us         INTEGER,
  ended_us           INTEGER,
  outcome            TEXT,
  error              TEXT,
  state_detail       TEXT,
  durable            INTEGER NOT NULL DEFAULT 0 CHECK (durable IN (0, 1)),
  approval_id        INTEGER REFERENCES approvals(id),
  source_hash        TEXT,
  manifest_hash      TEXT,
  manifest_text_hash TEXT,
  seed               TEXT,
  clock_us           INTEGER,
  resumes            INTEGER NOT NULL DEFAULT 0,
  attempt            INTEGER NOT NULL DEFAULT 1,
  wake_us            INTEGER,
  waiting_for        TEXT,
  waiting_key        TEXT,
  CHECK ((state = 'ended') = (outcome IS NOT NULL)),
  CHECK ((state IN ('sleeping', 'retrying')) <= (wake_us IS NOT NULL)),
  CHECK ((state = 'waiting') = (waiting_for IS NOT NULL)),
  CHECK (state <> 'queued' OR activation_id IS NULL OR durable = 1),
  CHECK (state <> 'running' OR activation_id IS NOT NULL)
);
INSERT INTO runs_v9(id, flow, input, triggered_by, idempotency_key, key_expires_us, state, activation_id, created_us,
                    started_us, ended_us, outcome, error, state_detail, durable, approval_id, source_hash,
                    manifest_hash, manifest_text_hash, seed, clock_us, resumes, attempt, wake_us, waiting_for,
                    waiting_key)
  SELECT id, flow, input, triggered_by, idempotency_key, key_expires_us, state, activation_id, created_us, started_us,
         ended_us, outcome, error, state_detail, durable, approval_id, source_hash, manifest_hash, manifest_text_hash,
         seed, clock_us, resumes, attempt, wake_us, waiting_for, waiting_key FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v9 RENAME TO runs;
CREATE INDEX runs_by_flow ON runs(flow, id);
CREATE UNIQUE INDEX runs_idempotency ON runs(flow, idempotency_key) WHERE idempotency_key <> '';
CREATE INDEX runs_by_wake ON runs(wake_us) WHERE wake_us IS NOT NULL;
CREATE INDEX runs_waiting ON runs(flow, waiting_for, waiting_key) WHERE waiting_for IS NOT NULL;
CREATE INDEX runs_unended ON runs(state, id) WHERE state = 'queued' OR state = 'running' OR state = 'interrupted'
  OR state = 'needs_reconciliation' OR state = 'sleeping' OR state = 'waiting' OR state = 'retrying';
)sql";

// Version 10 (from 9, and the last step of creation): fewer index pages in the hot commits
// (docs/performance.md, "Schema 10"). calls_by_activation (activation_id, seq) is dropped: every
// call's record wrote a page of it, one WAL frame more per host call. An activation's calls are
// read through UNIQUE (activation_id, call_id)'s prefix, in call id order, and put in record order
// (seq) by the reader (read_queries.cpp), at most one activation's records (budgets.journal_kb).
// activations_by_run holds only the activations marked listed_by_run: a durable run's (it has
// several, and its row names the last) and one its run's row does not name (a start the store
// refused because the run had ended or was taken: MarkRunStarted). A plain run's one activation
// is found through runs.activation_id instead, so its start writes no page of the index. Files of
// version 9 are marked from their runs.
constexpr const char* kV10Sql = R"sql(
DROP INDEX calls_by_activation;
ALTER TABLE activations ADD COLUMN listed_by_run INTEGER CHECK (listed_by_run = 1);
UPDATE activations SET listed_by_run = 1 WHERE run_id IS NOT NULL AND NOT EXISTS
  (SELECT 1 FROM runs r WHERE r.id = activations.run_id AND r.durable = 0 AND r.activation_id = activations.id);
DROP INDEX activations_by_run;
CREATE INDEX activations_by_run ON activations(run_id) WHERE listed_by_run = 1;
)sql";

// Version 2 to 3: the dropped-log count of an activation, and kv usage filled from what kv holds.
std::string MigrateFromV2Sql() {
  return std::string("ALTER TABLE activations ADD COLUMN logs_dropped INTEGER NOT NULL DEFAULT 0;\n") +
         kCreateKvUsage +
         "INSERT INTO kv_usage(namespace, bytes, keys) SELECT namespace, "
         "sum(length(CAST(key AS BLOB)) + length(CAST(value AS BLOB))), count(*) FROM kv GROUP BY namespace;\n";
}

// Shared by creation and migration: the index recovery and RenewLeases read (only unfinished
// activations are in it, so it stays small), and the meta table.
constexpr const char* kCreateCommon = R"sql(
CREATE INDEX activations_unfinished ON activations(owner_host, owner_pid, owner_start_ticks)
  WHERE outcome IS NULL;
CREATE TABLE meta(
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
)sql";

// Version 1 rows have no effect class; the built-ins are known, anything else gets the safe
// default of a spec (external).
constexpr const char* kV1EffectSql =
    "CASE WHEN name IN ('log', 'kv.get', 'kv.list') THEN 'pure' "
    "WHEN name IN ('kv.put', 'kv.delete') THEN 'idempotent' ELSE 'external' END";

constexpr const char* kV1VerdictSql = "CASE allowed WHEN 1 THEN 'allow' ELSE 'deny' END";

std::string MigrateFromV1Sql() {
  return std::string(R"sql(
ALTER TABLE activations ADD COLUMN owner_host TEXT NOT NULL DEFAULT '';
ALTER TABLE activations ADD COLUMN owner_pid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE activations ADD COLUMN owner_start_ticks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE activations ADD COLUMN lease_until_us INTEGER NOT NULL DEFAULT 0;
)sql") + CallsTableSql("calls_v2") +
         "INSERT INTO calls_v2(seq, activation_id, call_id, name, args, verdict, rule, reason, effect, state, "
         "result, error, start_us, end_us) SELECT seq, activation_id, call_id, name, args, " +
         kV1VerdictSql + ", reason, reason, " + kV1EffectSql +
         ", 'answered', result, error, start_us, end_us FROM calls ORDER BY seq;\n"
         "DROP TABLE calls;\n"
         "ALTER TABLE calls_v2 RENAME TO calls;\n" +
         kCreateCommon + MigrateFromV2Sql();
}

Result<void> Exec(sqlite3* db, const std::string& path, const std::string& sql, std::string_view what) {
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return DbError(path, db, rc, what);
  return Ok();
}

Result<void> InsertJournalId(sqlite3* db, const std::string& path) {
  Stmt stmt;
  int rc = Prepare(db, "INSERT INTO meta(key, value) VALUES('journal_id', ?)", &stmt);
  const std::string id = NewJournalId();
  if (rc == SQLITE_OK) rc = Binder(stmt.get()).Text(id).rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_DONE) return DbError(path, db, rc, "cannot record the journal id");
  return Ok();
}

// Inside BEGIN IMMEDIATE: creates or migrates, as the header (read under the lock) says.
Result<void> CreateOrMigrateLocked(sqlite3* db, const std::string& path) {
  Header h;
  const int rc = ReadHeader(db, &h);
  if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot re-read the database header");
  if (auto known = CheckHeader(path, h); !known) return known;
  const std::string mark = "PRAGMA application_id=" + std::to_string(kApplicationId) +
                           ";PRAGMA user_version=" + std::to_string(kSchemaVersion) + ";";
  if (h.empty()) {
    if (auto r = Exec(db, path,
                      kCreateActivationsAndKv + CallsTableSql("calls") + kCreateCommon + kCreateKvUsage + kV4Sql +
                          kV5Sql + kV6Sql + kV7Sql + kV8Sql + kV9Sql + kV10Sql,
                      "cannot create the schema");
        !r)
      return r;
  } else if (h.user_version == 1) {
    if (auto r = Exec(db, path, MigrateFromV1Sql() + kV4Sql + kV5Sql + kV6Sql + kV7Sql + kV8Sql + kV9Sql + kV10Sql,
                      "cannot migrate the journal from schema version 1");
        !r)
      return r;
  } else if (h.user_version >= 2 && h.user_version < kSchemaVersion) {
    // Each step the file lacks, in order: 2 -> 3 -> 4 -> 5 -> 6 -> 7 -> 8 -> 9 -> 10.
    const std::string steps = (h.user_version == 2 ? MigrateFromV2Sql() : std::string()) +
                              (h.user_version <= 3 ? kV4Sql : "") + (h.user_version <= 4 ? kV5Sql : "") +
                              (h.user_version <= 5 ? kV6Sql : "") + (h.user_version <= 6 ? kV7Sql : "") +
                              (h.user_version <= 7 ? kV8Sql : "") + (h.user_version <= 8 ? kV9Sql : "") +
                              kV10Sql;
    if (auto r = Exec(db, path, steps + "PRAGMA user_version=" + std::to_string(kSchemaVersion) + ";",
                      "cannot migrate the journal from schema version " + std::to_string(h.user_version));
        !r)
      return r;
    return Ok();  // it has its journal id already
  } else {
    return Ok();  // another process created or migrated it while we waited for the lock
  }
  if (auto r = InsertJournalId(db, path); !r) return r;
  return Exec(db, path, mark, "cannot mark the file as a basal journal");
}

}  // namespace

int ReadHeader(sqlite3* db, Header* header) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT (SELECT application_id FROM pragma_application_id()), "
                              "(SELECT user_version FROM pragma_user_version()), "
                              "(SELECT count(*) FROM sqlite_master)",
                              -1, &raw, nullptr);
  if (rc != SQLITE_OK) return rc;
  Stmt stmt(raw);
  rc = sqlite3_step(raw);
  if (rc != SQLITE_ROW) return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
  header->application_id = sqlite3_column_int64(raw, 0);
  header->user_version = sqlite3_column_int64(raw, 1);
  header->objects = sqlite3_column_int64(raw, 2);
  return SQLITE_OK;
}

Result<void> CheckHeader(const std::string& path, const Header& h) {
  if (h.empty()) return Ok();
  if (h.application_id != kApplicationId) {
    return JournalError(ErrorCode::kDatabase, path,
                        "is an SQLite database but not a basal journal (application_id " +
                            std::to_string(h.application_id) + ", " + std::to_string(h.objects) +
                            " schema objects); it was left unchanged: choose another --db");
  }
  if (h.user_version > kSchemaVersion) {
    return JournalError(ErrorCode::kDatabase, path,
                        "was written by a newer basal (schema version " + std::to_string(h.user_version) +
                            ", this basal knows up to " + std::to_string(kSchemaVersion) +
                            "); upgrade basal or choose another --db");
  }
  if (h.user_version < kOldestReadableSchemaVersion) {
    return JournalError(ErrorCode::kDatabase, path,
                        "is marked as a basal journal but has no schema version (" + std::to_string(h.user_version) +
                            "); it is damaged: move it aside");
  }
  return Ok();
}

Result<void> InitializeForWriting(sqlite3* db, const std::string& path, Durability durability) {
  Header h;
  int rc = RetryWhileBusy([&] { return ReadHeader(db, &h); });
  if ((rc & 0xff) == SQLITE_NOTADB) {
    return DbError(path, db, rc, "is not an SQLite database",
                   "point --db at a basal journal or at a file that does not exist yet");
  }
  if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot read the database header");
  if (auto known = CheckHeader(path, h); !known) return known;

  // Switching a new file to WAL needs an exclusive lock that SQLite does not wait for through the
  // busy handler when other processes are opening the same new file: retry with a backoff.
  std::string mode;
  rc = RetryWhileBusy([&] { return QueryText(db, "PRAGMA journal_mode=WAL", &mode); });
  if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot switch to WAL mode");
  if (mode != "wal") {
    return JournalError(ErrorCode::kDatabase, path,
                        "SQLite refused WAL mode (journal_mode is \"" + mode + "\"); use a file on a local file system");
  }
  const char* sync_sql = durability == Durability::kFull ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
  rc = sqlite3_exec(db, sync_sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot apply connection settings");

  auto foreign_keys_on = [&]() -> Result<void> {
    if (const int fk = sqlite3_exec(db, "PRAGMA foreign_keys=ON", nullptr, nullptr, nullptr); fk != SQLITE_OK)
      return DbError(path, db, fk, "cannot apply connection settings");
    return Ok();
  };
  if (!h.empty() && h.user_version == kSchemaVersion) return foreign_keys_on();
  // Off while the schema is made: a step that rebuilds a table other tables refer to (version 9)
  // drops the old one, which with foreign keys on would first delete its rows and be refused. The
  // rows are copied with their ids, so every reference holds again once the new table is renamed.
  // (The pragma is a no-op inside a transaction: set before BEGIN, and again after its end.)
  rc = sqlite3_exec(db, "PRAGMA foreign_keys=OFF", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return DbError(path, db, rc, "cannot apply connection settings");
  rc = RetryWhileBusy([&] { return sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr); });
  if (rc != SQLITE_OK) return DbError(path, db, rc, h.empty() ? "cannot start creating the schema"
                                                               : "cannot start migrating the schema");
  Result<void> made = CreateOrMigrateLocked(db, path);
  if (made) {
    rc = RetryWhileBusy([&] { return sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr); });
    if (rc != SQLITE_OK) made = DbError(path, db, rc, "cannot commit the new schema");
  }
  if (!made && sqlite3_get_autocommit(db) == 0) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  if (auto on = foreign_keys_on(); !on && made) return on;
  return made;
}

Result<std::string> ReadJournalId(sqlite3* db, const std::string& path) {
  std::string id;
  const int rc = QueryText(db, "SELECT value FROM meta WHERE key='journal_id'", &id);
  if (rc != SQLITE_OK || id.empty()) {
    return DbError(path, db, rc == SQLITE_OK ? SQLITE_CORRUPT : rc, "cannot read the journal id",
                   "the meta table lacks it: the file was changed by hand; move it aside");
  }
  return id;
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

std::string ActivationSelectSql(int64_t schema_version) {
  const std::string owner =
      schema_version >= 2 ? "owner_host, owner_pid, owner_start_ticks, lease_until_us" : "'', 0, 0, 0";
  const std::string dropped = schema_version >= 3 ? "logs_dropped" : "0";
  const std::string origin =
      schema_version >= 4 ? "origin, coalesce(approval_id, 0), coalesce(manifest_text_hash, '')" : "'unrecorded', 0, ''";
  // An activation of a run keeps no input of its own: the run's is read.
  const std::string input =
      schema_version >= 6
          ? "CASE WHEN run_id IS NULL THEN input ELSE coalesce((SELECT r.input FROM runs r WHERE r.id = activations.run_id), '') END"
          : "input";
  const std::string run = schema_version >= 6 ? "coalesce(run_id, 0), coalesce(retry_from, 0)" : "0, 0";
  return "SELECT id, flow, source_hash, manifest_hash, " + input + ", start_us, end_us, outcome, result, error, cpu_us, " +
         owner + ", " + dropped + ", " + origin + ", " + run + " FROM activations";
}

std::string CallSelectSql(int64_t schema_version) {
  const std::string replay =
      schema_version >= 6 ? ", coalesce(args_digest, ''), answer_seq, coalesce(replay, '')" : ", '', NULL, ''";
  if (schema_version >= 2) {
    return "SELECT activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, "
           "start_us, end_us" + replay + ", seq FROM calls";
  }
  return std::string("SELECT activation_id, call_id, name, args, ") + kV1VerdictSql + ", reason, reason, " +
         kV1EffectSql + ", 'answered', result, error, start_us, end_us" + replay + ", seq FROM calls";
}

std::string RunSelectSql(int64_t schema_version) {
  const std::string binding =
      schema_version >= 6
          ? "durable, coalesce(approval_id, 0), coalesce(source_hash, ''), coalesce(manifest_hash, ''), "
            "coalesce(manifest_text_hash, ''), coalesce(seed, ''), coalesce(clock_us, 0), resumes, attempt, wake_us, "
            "coalesce(waiting_for, ''), coalesce(waiting_key, '')"
          : "0, 0, '', '', '', '', 0, 0, 1, NULL, '', ''";
  return "SELECT id, flow, input, triggered_by, idempotency_key, state, coalesce(activation_id, 0), created_us, "
         "started_us, ended_us, outcome, error, state_detail, " + binding + " FROM runs";
}

}  // namespace basal::sqlite
