// The PostgreSQL store: journal, kv, reader, catalog, runs and serve's tables on one connection in
// pipeline mode and one batch (see pg_store.h, docs/postgres.md).
#include "parent/store/postgres/pg_store.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <utility>

#include "basal/manifest.h"
#include "basal/outcome.h"
#include "parent/store/locator.h"
#include "parent/store/owner.h"
#include "parent/store/postgres/pg_support.h"
#include "parent/store/postgres/read_queries.h"
#include "parent/store/postgres/schema.h"

namespace basal {
namespace {

using pg::Failure;
using pg::Params;
using pg::Rows;

// Activation ids are drawn from the sequence this many at a time, so that beginning an activation
// needs no round trip (while a commit is in flight it would wait for it).
constexpr int kReservedIds = 32;

// Now by the server's clock, in microseconds since the epoch: what every lease is measured by when
// several hosts share the store (JournalStore::UseServerClockLeases).
const std::string kServerNowUs = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

// The states a call record may move to `to` from (store.h: CallState), as in the SQLite backend.
std::vector<const char*> PgAllowedFrom(CallState to) {
  switch (to) {
    case CallState::kDecided: return {};
    case CallState::kStarted: return {"decided"};
    case CallState::kAnswered: return {"decided", "started"};
    case CallState::kAbandoned: return {"decided", "started", "abandoned"};
    case CallState::kUnknown: return {"started"};
  }
  return {};
}

// The moves of RunState's diagram (store.h) that do not end a run.
bool PgRunMoveAllowed(RunState from, RunState to) {
  switch (to) {
    case RunState::kInterrupted:
      return from == RunState::kRunning || from == RunState::kNeedsReconciliation || RunParked(from);
    case RunState::kQueued: return from == RunState::kInterrupted || RunParked(from);
    case RunState::kSleeping:
    case RunState::kWaiting:
    case RunState::kRetrying: return from == RunState::kRunning;
    case RunState::kNeedsReconciliation: return from == RunState::kQueued || from == RunState::kRunning;
    case RunState::kRunning:
    case RunState::kEnded: return false;
  }
  return false;
}

// A limit as the kv functions take it (numeric: UINT64_MAX fits).
std::string LimitText(uint64_t v) { return std::to_string(v); }

// Every statement of the store. Those ending in "_behind" are what a write sends while a commit is
// in flight: they raise instead of changing nothing, so that their refusal aborts their batch.
std::vector<pg::StatementDef> Statements() {
  const std::string activations = pg::kActivationSelect;
  std::vector<pg::StatementDef> defs = {
      // ---- journal ----
      {"reserve_ids", "SELECT nextval('activations_id_seq') FROM generate_series(1, $1::int)"},
      {"insert_activation",
       "INSERT INTO activations(id, flow, source_hash, manifest_hash, input, start_us, owner_host, owner_pid, "
       "owner_start_ticks, lease_until_us, origin, approval_id, manifest_text_hash, run_id, retry_from) "
       "SELECT $1::bigint, $2::text, $3::text, $4::text, $5::text, $6::bigint, $7::text, $8::bigint, $9::bigint, "
       "CASE WHEN $16::bigint > 0 THEN " + kServerNowUs + " + $16::bigint ELSE $10::bigint END, "
       "$11::text, $12::bigint, $13::text, $14::bigint, $15::bigint "
       "WHERE $12::bigint IS NULL OR EXISTS (SELECT 1 FROM approvals WHERE id = $12::bigint)"},
      {"insert_activation_behind",
       "INSERT INTO activations(id, flow, source_hash, manifest_hash, input, start_us, owner_host, owner_pid, "
       "owner_start_ticks, lease_until_us, origin, approval_id, manifest_text_hash, run_id, retry_from) "
       "VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, CASE WHEN $16::bigint > 0 THEN " + kServerNowUs +
           " + $16::bigint ELSE $10::bigint END, $11, $12, $13, $14, $15)"},
      {"insert_call",
       "INSERT INTO calls(activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, "
       "start_us, end_us, args_digest, answer_seq, replay) "
       "SELECT $1::bigint, $2::bigint, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text, "
       "$10::text, $11::text, $12::bigint, $13::bigint, $14::text, $15::bigint, $16::text "
       "WHERE EXISTS (SELECT 1 FROM activations WHERE id = $1::bigint) "
       "ON CONFLICT (activation_id, call_id) DO NOTHING"},
      {"insert_call_behind",
       "INSERT INTO calls(activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, "
       "start_us, end_us, args_digest, answer_seq, replay) "
       "VALUES($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"},
      // Several hosts: a call is recorded only while its activation is unfinished (nobody took the
      // run over). FOR SHARE holds off a takeover's close until this batch ends, and a close that
      // committed first is seen (READ COMMITTED re-reads the locked row).
      {"insert_call_fenced",
       "INSERT INTO calls(activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, "
       "start_us, end_us, args_digest, answer_seq, replay) "
       "SELECT $1::bigint, $2::bigint, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text, "
       "$10::text, $11::text, $12::bigint, $13::bigint, $14::text, $15::bigint, $16::text "
       "WHERE EXISTS (SELECT 1 FROM activations WHERE id = $1::bigint AND outcome IS NULL FOR SHARE) "
       "ON CONFLICT (activation_id, call_id) DO NOTHING"},
      {"insert_call_fenced_behind",
       "INSERT INTO calls(activation_id, call_id, name, args, verdict, rule, reason, effect, state, result, error, "
       "start_us, end_us, args_digest, answer_seq, replay) "
       "SELECT $1::bigint, $2::bigint, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text, "
       "$10::text, $11::text, $12::bigint, $13::bigint, $14::text, $15::bigint, $16::text "
       "FROM (SELECT count(*) AS n FROM (SELECT 1 FROM activations WHERE id = $1::bigint AND outcome IS NULL "
       "FOR SHARE) l) c, LATERAL basal.expect_one(c.n, $17::text) e"},
      {"update_call",
       "UPDATE calls SET state = $1::text, result = coalesce($2::text, result), error = coalesce($3::text, error), "
       "end_us = coalesce($4::bigint, end_us), answer_seq = coalesce($5::bigint, answer_seq), "
       "replay = coalesce($6::text, replay) "
       "WHERE activation_id = $7::bigint AND call_id = $8::bigint AND state IN ($9::text, $10::text, $11::text)"},
      {"update_call_behind",
       "WITH u AS (UPDATE calls SET state = $1::text, result = coalesce($2::text, result), "
       "error = coalesce($3::text, error), end_us = coalesce($4::bigint, end_us), "
       "answer_seq = coalesce($5::bigint, answer_seq), replay = coalesce($6::text, replay) "
       "WHERE activation_id = $7::bigint AND call_id = $8::bigint AND state IN ($9::text, $10::text, $11::text) "
       "RETURNING 1) SELECT basal.expect_one((SELECT count(*) FROM u), $12::text)"},
      {"call_state", "SELECT state FROM calls WHERE activation_id = $1::bigint AND call_id = $2::bigint"},
      {"end_activation",
       "UPDATE activations SET end_us = $1::bigint, outcome = $2::text, result = $3::text, error = $4::text, "
       "cpu_us = $5::bigint, logs_dropped = $6::bigint WHERE id = $7::bigint AND outcome IS NULL"},
      {"end_activation_behind",
       "WITH u AS (UPDATE activations SET end_us = $1::bigint, outcome = $2::text, result = $3::text, "
       "error = $4::text, cpu_us = $5::bigint, logs_dropped = $6::bigint WHERE id = $7::bigint AND outcome IS NULL "
       "RETURNING 1) SELECT basal.expect_one((SELECT count(*) FROM u), $8::text)"},
      {"renew_leases",
       "UPDATE activations SET lease_until_us = $1::bigint "
       "WHERE outcome IS NULL AND owner_host = $2::text AND owner_pid = $3::bigint AND owner_start_ticks = $4::bigint"},
      {"unfinished", activations + " WHERE outcome IS NULL ORDER BY id"},
      {"server_now", "SELECT " + kServerNowUs},
      {"takeover_lock_timeout", "SELECT set_config('lock_timeout', '500ms', true)"},
      // What a takeover looks at: lapsed leases, and the unfinished activations of this machine
      // (a process that is gone is seen at once).
      {"unfinished_lapsed", activations + " WHERE outcome IS NULL AND (lease_until_us < $1::bigint OR "
                                          "owner_host = $2::text) ORDER BY id"},
      // The host's own row (its queued runs' holder, $5; NULL: none) is renewed in the same
      // statement as its activations' leases.
      {"renew_leases_server_clock",
       "WITH host AS (INSERT INTO hosts(host_id, lease_until_us, seen_us) SELECT $5::text, " + kServerNowUs +
           " + $1::bigint, " + kServerNowUs + " WHERE $5::text IS NOT NULL ON CONFLICT (host_id) DO UPDATE SET "
           "lease_until_us = excluded.lease_until_us, seen_us = excluded.seen_us) "
           "UPDATE activations SET lease_until_us = " + kServerNowUs + " + $1::bigint "
           "WHERE outcome IS NULL AND owner_host = $2::text AND owner_pid = $3::bigint AND owner_start_ticks = $4::bigint"},
      // A host's rows lapsed a day ago are forgotten when a host registers (their runs, if any, are
      // then held by nobody, which the claims treat as lapsed).
      {"register_host",
       "WITH gone AS (DELETE FROM hosts WHERE lease_until_us < " + kServerNowUs + " - 86400000000 AND host_id <> $1::text) "
       "INSERT INTO hosts(host_id, lease_until_us, seen_us) VALUES($1::text, " + kServerNowUs + " + $2::bigint, " +
           kServerNowUs + ") ON CONFLICT (host_id) DO UPDATE SET lease_until_us = excluded.lease_until_us, "
           "seen_us = excluded.seen_us"},
      {"leave_hosts", "UPDATE hosts SET lease_until_us = 0 WHERE host_id = $1::text"},
      // $2: 0 lapsed holders only, 1 also live holders' runs not held back, 2 at a host's start
      // (also its own id's). Rows another transaction holds are skipped: a holder starting the run
      // now, or another host claiming it.
      {"claim_queued",
       "WITH c AS (UPDATE runs SET queued_by = $1::text, held = false WHERE id IN (SELECT r.id FROM runs r "
       "WHERE r.state = 'queued' AND (r.triggered_by = 'api' OR r.triggered_by LIKE 'webhook:%' OR "
       "r.triggered_by LIKE 'schedule:%') AND ($2::int = 2 OR r.queued_by IS DISTINCT FROM $1::text) AND "
       "(r.queued_by IS NULL OR NOT EXISTS (SELECT 1 FROM hosts h WHERE h.host_id = r.queued_by AND "
       "h.lease_until_us >= " + kServerNowUs + ") OR ($2::int = 2 AND r.queued_by = $1::text) OR "
       "($2::int = 1 AND NOT r.held)) ORDER BY r.id LIMIT $3::bigint FOR UPDATE SKIP LOCKED) RETURNING id) " +
           std::string(pg::kRunSelect) + " WHERE id IN (SELECT id FROM c) ORDER BY id"},
      {"release_held", "UPDATE runs SET held = false WHERE id = $1::bigint AND state = 'queued'"},
      {"notify_queued", "SELECT pg_notify('basal_queued_runs', $1::text)"},
      {"notify_taken", "SELECT pg_notify('basal_taken_runs', $1::text)"},
      {"taken_over", "SELECT id FROM activations WHERE id = ANY($1::bigint[]) AND outcome IS NOT NULL ORDER BY id"},
      {"close_activation",
       "UPDATE activations SET end_us = $1::bigint, outcome = 'abandoned', result = NULL, error = $2::text, "
       "cpu_us = 0 WHERE id = $3::bigint AND outcome IS NULL"},
      {"calls_to_state",
       "UPDATE calls SET state = $1::text, error = coalesce(error, $2::text), end_us = coalesce(end_us, $3::bigint) "
       "WHERE activation_id = $4::bigint AND state = $5::text"},
      // ---- kv ----
      {"kv_get", "SELECT value FROM kv WHERE namespace = $1::bytea AND key = $2::bytea"},
      {"kv_usage", "SELECT bytes, keys FROM kv_usage WHERE namespace = $1::bytea"},
      {"kv_value_bytes", "SELECT octet_length(value) FROM kv WHERE namespace = $1::bytea AND key = $2::bytea"},
      {"kv_put", "SELECT basal.kv_put($1::bytea, $2::bytea, $3::text)"},
      {"kv_delete", "SELECT basal.kv_delete($1::bytea, $2::bytea)"},
      // The running byte total goes with each entry, so only what fits (and the entry past it) is sent.
      {"kv_list",
       "SELECT key, value, running FROM (SELECT key, value, sum(octet_length(key) + octet_length(value)) "
       "OVER (ORDER BY key ROWS UNBOUNDED PRECEDING) AS running FROM kv "
       "WHERE namespace = $1::bytea AND key >= $2::bytea AND ($3::bytea IS NULL OR key < $3::bytea) "
       "ORDER BY key LIMIT $4::bigint) s "
       "WHERE running - octet_length(key) - octet_length(value) <= $5::numeric ORDER BY key"},
      {"kv_write",
       "SELECT status, current, value_bytes, usage_bytes, usage_keys FROM basal.kv_write($1::text, $2::bytea, "
       "$3::bytea, $4::text, $5::text, $6::bigint, $7::numeric, $8::numeric, $9::numeric)"},
      // ---- catalog ----
      {"keep_text", "INSERT INTO texts(hash, body) VALUES($1::text, $2::bytea) ON CONFLICT (hash) DO NOTHING"},
      {"lock_approvals", "LOCK TABLE approvals IN SHARE ROW EXCLUSIVE MODE"},
      {"insert_approval",
       "INSERT INTO approvals(kind, name, version, source_hash, manifest_text_hash, manifest_hash, approver_uid, "
       "approver_name, approved_us, note) VALUES($1::text, $2::text, "
       "(SELECT coalesce(max(version), 0) + 1 FROM approvals WHERE kind = $1::text AND name = $2::text), "
       "$3::text, $4::text, $5::text, $6::bigint, $7::text, $8::bigint, $9::text) RETURNING id"},
      {"revoke_approval",
       "UPDATE approvals SET revoked_us = $1::bigint, revoker_uid = $2::bigint, revoker_name = $3::text, "
       "revoke_note = $4::text WHERE id = $5::bigint AND revoked_us IS NULL"},
      {"insert_event",
       "INSERT INTO approval_events(at_us, kind, approval_id, actor_uid, actor_name, detail) "
       "VALUES($1::bigint, $2::text, $3::bigint, $4::bigint, $5::text, $6::text)"},
      {"is_revoked", "SELECT revoked_us IS NOT NULL FROM approvals WHERE id = $1::bigint"},
      // ---- runs ----
      {"insert_run",
       "INSERT INTO runs(flow, input, triggered_by, idempotency_key, key_expires_us, state, created_us, state_detail, "
       "durable, queued_by, held) VALUES($1::text, $2::text, $3::text, $4::text, $5::bigint, 'queued', $6::bigint, "
       "$7::text, $8::smallint, $9::text, $10::boolean) ON CONFLICT (flow, idempotency_key) WHERE idempotency_key <> '' DO NOTHING RETURNING id"},
      {"run_by_key",
       "SELECT id, input, coalesce(key_expires_us, 0) FROM runs WHERE flow = $1::text AND idempotency_key = $2::text "
       "AND idempotency_key <> '' FOR UPDATE"},
      {"clear_run_key", "UPDATE runs SET idempotency_key = '', key_expires_us = NULL WHERE id = $1::bigint"},
      // The binding is set once, by the first start: a resume keeps it. The claim skips a row
      // another process's open batch holds instead of waiting for it: two hosts that hold the
      // same queued runs would otherwise wait for each other's batches, and once they took two
      // runs in crossing order the server would end one batch as a deadlock, every run in it
      // failing (MarkRunStarted then says the run is being taken elsewhere).
      {"start_run",
       "UPDATE runs SET state = 'running', activation_id = $1::bigint, started_us = coalesce(started_us, $2::bigint), "
       "approval_id = CASE WHEN source_hash IS NULL THEN $3::bigint ELSE approval_id END, "
       "manifest_hash = coalesce(manifest_hash, $4::text), manifest_text_hash = coalesce(manifest_text_hash, $5::text), "
       "seed = coalesce(seed, $6::text), clock_us = coalesce(clock_us, $7::bigint), "
       "source_hash = coalesce(source_hash, $8::text) WHERE id = (SELECT id FROM runs WHERE id = $9::bigint AND "
       "state = 'queued' AND ($10::text IS NULL OR queued_by = $10::text) FOR UPDATE SKIP LOCKED)"},
      {"run_state", "SELECT state FROM runs WHERE id = $1::bigint FOR UPDATE"},
      {"run_state_unlocked", "SELECT state FROM runs WHERE id = $1::bigint"},
      {"end_run",
       "UPDATE runs SET state = 'ended', outcome = $1::text, error = $2::text, ended_us = $3::bigint, "
       "wake_us = NULL, waiting_for = NULL, waiting_key = NULL WHERE id = $4::bigint AND state = $5::text"},
      // MarkRunEnded's rules (which outcome each state may end with) in the statement itself.
      {"end_run_behind",
       "WITH u AS (UPDATE runs SET state = 'ended', outcome = $1::text, error = $2::text, ended_us = $3::bigint, "
       "wake_us = NULL, waiting_for = NULL, waiting_key = NULL "
       "WHERE id = $4::bigint AND ((state = 'running' AND $5::boolean) "
       "OR (state = 'queued' AND $1::text IN ('cancelled', 'missed', 'skipped')) "
       "OR (state IN ('sleeping', 'waiting', 'retrying') AND $1::text = 'cancelled') "
       "OR (state IN ('interrupted', 'needs_reconciliation') AND ($1::text IN ('cancelled', 'resume_exhausted') "
       "OR $5::boolean))) RETURNING 1) SELECT basal.expect_one((SELECT count(*) FROM u), $6::text)"},
      {"runs_in_state", std::string(pg::kRunSelect) + " WHERE state = $1::text ORDER BY id LIMIT $2::bigint"},
      {"count_runs", "SELECT count(*) FROM runs WHERE state = $1::text"},
      // A durable run whose activation was abandoned waits to be resumed; every other one ends with
      // its activation. The detail is written as the SQLite backend writes it.
      {"interrupt_runs",
       "UPDATE runs SET state = 'interrupted', state_detail = '{\"interrupted_us\":' || $1::bigint || "
       "',\"activation\":' || a.id || '}' FROM activations a WHERE a.id = runs.activation_id "
       "AND runs.state = 'running' AND runs.durable = 1 AND a.outcome = 'abandoned'"},
      {"settle_runs",
       "UPDATE runs SET state = 'ended', outcome = a.outcome, error = a.error, ended_us = coalesce(a.end_us, $1::bigint) "
       "FROM activations a WHERE a.id = runs.activation_id AND runs.state = 'running' AND a.outcome IS NOT NULL"},
      {"move_run",
       "UPDATE runs SET state = $1::text, state_detail = coalesce($2::text, state_detail), resumes = resumes + $3::bigint, "
       "attempt = attempt + $4::bigint, wake_us = $5::bigint, waiting_for = $6::text, waiting_key = $7::text, "
       "queued_by = CASE WHEN $1::text = 'queued' THEN $10::text ELSE queued_by END "
       "WHERE id = $8::bigint AND state = $9::text"},
      // ---- parked runs and their events (docs/durable.md) ----
      {"runs_due",
       std::string(pg::kRunSelect) +
           " WHERE wake_us IS NOT NULL AND wake_us <= $1::bigint AND state IN ('sleeping', 'waiting', 'retrying') "
           "ORDER BY wake_us, id LIMIT $2::bigint"},
      {"next_wake",
       "SELECT min(wake_us) FROM runs WHERE wake_us IS NOT NULL AND state IN ('sleeping', 'waiting', 'retrying')"},
      {"count_parked", "SELECT count(*) FROM runs WHERE state IN ('sleeping', 'waiting', 'retrying')"},
      {"count_parked_flow",
       "SELECT count(*) FROM runs WHERE state IN ('sleeping', 'waiting', 'retrying') AND flow = $1::text"},
      {"runs_waiting_for",
       std::string(pg::kRunSelect) +
           " WHERE flow = $1::text AND waiting_for = $2::text AND coalesce(waiting_key, '') = $3::text "
           "AND state = 'waiting' ORDER BY id LIMIT $4::bigint"},
      {"count_runs_by_flow",
       "SELECT flow, state, count(*) FROM runs WHERE state = ANY($1::text[]) GROUP BY flow, state "
       "ORDER BY flow, state LIMIT $2::bigint"},
      {"insert_run_event",
       "INSERT INTO run_events(run_id, flow, name, event_key, payload, sender, received_us, expires_us, delivery_id) "
       "VALUES($1::bigint, $2::text, $3::text, $4::text, $5::text, $6::text, $7::bigint, $8::bigint, $9::text) "
       "ON CONFLICT (flow, delivery_id) WHERE delivery_id <> '' DO NOTHING RETURNING id"},
      {"run_event_of_delivery",
       "SELECT id FROM run_events WHERE flow = $1::text AND delivery_id = $2::text AND delivery_id <> ''"},
      // The oldest undelivered event for the wait, sent to the run or keyed for its flow, taken in one
      // statement: its row lock makes one event go to one wait across processes.
      {"take_run_event",
       "UPDATE run_events SET run_id = $1::bigint, delivered_activation = $6::bigint, delivered_call = $7::bigint, "
       "delivered_us = $5::bigint WHERE delivered_us IS NULL AND id = (SELECT id FROM run_events "
       "WHERE delivered_us IS NULL AND name = $2::text AND expires_us > $5::bigint AND "
       "(run_id = $1::bigint OR ($4::text <> '' AND run_id IS NULL AND flow = $3::text AND event_key = $4::text)) "
       "ORDER BY id LIMIT 1 FOR UPDATE) "
       "RETURNING id, coalesce(run_id, 0), flow, name, event_key, payload, sender, received_us, expires_us, "
       "coalesce(delivered_activation, 0), coalesce(delivered_call, 0), delivered_us"},
      {"count_pending_events", "SELECT count(*) FROM run_events WHERE run_id = $1::bigint AND delivered_us IS NULL"},
      {"count_pending_keyed",
       "SELECT count(*) FROM run_events WHERE run_id IS NULL AND flow = $1::text AND delivered_us IS NULL"},
      {"run_events",
       "SELECT id, coalesce(run_id, 0), flow, name, event_key, payload, sender, received_us, expires_us, "
       "coalesce(delivered_activation, 0), coalesce(delivered_call, 0), delivered_us FROM run_events "
       "WHERE run_id = $1::bigint ORDER BY id LIMIT $2::bigint"},
      {"drop_expired_events",
       "DELETE FROM run_events WHERE id IN (SELECT id FROM run_events WHERE delivered_us IS NULL "
       "AND expires_us <= $1::bigint ORDER BY expires_us LIMIT $2::bigint)"},
      {"insert_kv_audit",
       "INSERT INTO kv_audit(at_us, actor_uid, actor_name, reason, namespace, key, op, value_sha256, value_bytes, "
       "existed) VALUES($1::bigint, $2::bigint, $3::text, $4::text, $5::bytea, $6::bytea, $7::text, $8::text, "
       "$9::bigint, $10::bigint <> 0) RETURNING seq"},
      {"insert_resolution",
       "INSERT INTO call_resolutions(run_id, activation_id, call_id, kind, value, actor_uid, actor_name, at_us, note) "
       "VALUES($1::bigint, $2::bigint, $3::bigint, $4::text, $5::text, $6::bigint, $7::text, $8::bigint, $9::text) "
       "RETURNING seq"},
      // ---- serve's tables ----
      {"insert_token",
       "INSERT INTO tokens(name, hash, scopes, creator_uid, creator_name, created_us) "
       "VALUES($1::text, $2::text, $3::text, $4::bigint, $5::text, $6::bigint) ON CONFLICT DO NOTHING RETURNING id"},
      {"token_name_unrevoked", "SELECT id FROM tokens WHERE name = $1::text AND revoked_us IS NULL"},
      {"token_hash_known", "SELECT name FROM tokens WHERE hash = $1::text"},
      {"find_token", std::string(pg::kTokenSelect) + " WHERE hash = $1::text AND revoked_us IS NULL"},
      {"revoke_token",
       "UPDATE tokens SET revoked_us = $1::bigint, revoker_uid = $2::bigint, revoker_name = $3::text "
       "WHERE name = $4::text AND revoked_us IS NULL"},
      {"schedule_mark", "SELECT fire_us FROM schedule_marks WHERE trigger_name = $1::text"},
      {"set_schedule_mark",
       "INSERT INTO schedule_marks(trigger_name, fire_us) VALUES($1::text, $2::bigint) "
       "ON CONFLICT (trigger_name) DO UPDATE SET fire_us = excluded.fire_us"},
      // ---- health ----
      {"writable", "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'"},
  };
  for (pg::StatementDef& d : pg::ReadStatements()) defs.push_back(std::move(d));
  return defs;
}

std::vector<std::string> Session(Durability durability, bool read_only) {
  std::vector<std::string> session = {"SET search_path = basal", "SET bytea_output = 'hex'",
                                      // READ COMMITTED whatever the role's default: every statement
                                      // sees what committed before it, as the batch's reads expect.
                                      "SET default_transaction_isolation = 'read committed'"};
  if (durability == Durability::kFull) session.push_back("SET synchronous_commit = on");
  if (read_only) session.push_back("SET default_transaction_read_only = on");
  return session;
}

// Opens a connection whose database holds a current basal schema (creating it unless read only);
// `journal_id`, when given, receives the store's id (at every connect: a reset's too).
Result<std::unique_ptr<pg::Connection>> Connect(const std::string& uri, Durability durability, bool read_only,
                                                std::vector<pg::StatementDef> statements,
                                                std::shared_ptr<std::string> journal_id = nullptr) {
  const std::string shown = RedactLocator(uri);
  auto setup = [shown, read_only, journal_id](PGconn* conn) -> Result<void> {
    if (auto made = pg::PrepareSchema(conn, shown, read_only); !made) return made;
    if (!journal_id) return Ok();
    auto id = pg::ReadJournalId(conn, shown);
    if (!id) return id.error();
    *journal_id = std::move(*id);
    return Ok();
  };
  return pg::Connection::Open(uri, shown, Session(durability, read_only), setup, std::move(statements));
}

class PgStore final : public Store,
                      public JournalStore,
                      public KvStore,
                      public pg::JournalReads,
                      public Catalog,
                      public RunStore,
                      public ServeTables {
 public:
  PgStore(std::unique_ptr<pg::Connection> conn, std::string journal_id)
      : conn_(std::move(conn)), journal_id_(std::move(journal_id)) {}
  ~PgStore() override {
    // Never commits: an open batch is rolled back with the connection; a commit in flight ends as
    // the server ends it (the connection closes once its answer is read).
    if (flight_) conn_->Drain();
  }
  PgStore(const PgStore&) = delete;
  PgStore& operator=(const PgStore&) = delete;

  // Store
  JournalStore& journal() override { return *this; }
  KvStore& kv() override { return *this; }
  JournalReader& reader() override { return *this; }
  Result<void> OpenBatch() override { return BeginBatchIfNone(); }
  Catalog& catalog() override { return *this; }
  RunStore& runs() override { return *this; }
  ServeTables& serve() override { return *this; }
  Result<void> Commit() override;
  bool HasPendingBatch() const override { return batch_open_; }
  Result<void> Rollback() override;
  std::optional<Result<void>> StartCommit() override;
  std::optional<Result<void>> PollCommit() override;
  bool CommitInFlight() const override { return flight_.has_value(); }
  StoreIo io() const override { return {conn_->fd(), conn_->want_write()}; }
  Result<void> Check() override;
  std::string journal_id() const override { return journal_id_; }
  std::string location() const override { return conn_->shown(); }
  std::string ForFlow(const Error& error) const override;

  // JournalStore
  Result<int64_t> BeginActivation(const ActivationStart& start) override;
  Result<void> RecordCall(const CallRecord& call) override;
  Result<void> UpdateCall(const CallUpdate& update) override;
  Result<void> EndActivation(const ActivationEnd& end) override;
  Result<void> RenewLeases(const ActivationOwner& owner, int64_t until_unix_us) override;
  Result<RecoveryReport> RecoverAbandoned(const ActivationOwner& self, int64_t now_unix_us) override;
  Result<void> UseServerClockLeases(std::chrono::milliseconds lease) override;
  Result<std::vector<int64_t>> RenewAndCheckLeases(const ActivationOwner& owner,
                                                   const std::vector<int64_t>& held) override;
  Result<RecoveryReport> TakeExpiredLeases(const ActivationOwner& self) override;

  // KvStore
  Result<std::optional<std::string>> Get(const std::string& ns, const std::string& key) override;
  Result<void> Put(const std::string& ns, const std::string& key, const std::string& value_json) override;
  Result<bool> Delete(const std::string& ns, const std::string& key) override;
  Result<KvList> List(const std::string& ns, const std::string& prefix, size_t limit, size_t max_bytes) override;
  Result<KvUsage> Usage(const std::string& ns) override;
  Result<std::optional<uint64_t>> ValueBytes(const std::string& ns, const std::string& key) override;
  Result<KvUpdate> CompareAndSwap(const std::string& ns, const std::string& key,
                                  const std::optional<std::string>& expected_json, const std::string& value_json,
                                  const KvLimits& limits) override;
  Result<KvUpdate> Increment(const std::string& ns, const std::string& key, int64_t by,
                             const KvLimits& limits) override;
  Result<KvUpdate> PutWithin(const std::string& ns, const std::string& key, const std::string& value_json,
                             const KvLimits& limits) override;
  Result<int64_t> RecordOperatorWrite(const KvAuditEntry& entry) override;

  // Catalog
  Result<ApprovalRow> Approve(const NewApproval& approval) override;
  Result<ApprovalRow> Revoke(ApprovalKind kind, const std::string& name, int64_t version, const Actor& by,
                             int64_t at_unix_us, const std::string& note) override;
  Result<bool> IsRevoked(int64_t approval_id) override;
  Result<void> KeepText(const std::string& hash, std::string_view text) override;

  // RunStore (JournalReader's GetRun and Resolutions answer for both)
  Result<EnqueueResult> EnqueueRun(const NewRun& run) override;
  Result<void> MarkRunStarted(int64_t run_id, int64_t activation_id, int64_t at_unix_us,
                              const RunBinding& binding = {}) override;
  Result<RunRow> MoveRun(const RunMove& move) override;
  Result<int64_t> AddResolution(const CallResolution& resolution) override;
  Result<std::vector<CallResolution>> Resolutions(int64_t run_id) override {
    return pg::JournalReads::Resolutions(run_id);
  }
  Result<void> MarkRunEnded(int64_t run_id, std::string_view outcome, std::string_view error_json,
                            int64_t at_unix_us) override;
  Result<std::optional<RunRow>> GetRun(int64_t run_id) override { return pg::JournalReads::GetRun(run_id); }
  Result<std::vector<RunRow>> RunsInState(RunState state, size_t limit) override;
  Result<size_t> CountRuns(RunState state) override;
  Result<size_t> SettleRunsOfEndedActivations(int64_t at_unix_us) override;
  Result<std::vector<RunRow>> RunsDue(int64_t now_unix_us, size_t limit) override;
  Result<std::optional<int64_t>> NextWake() override;
  Result<size_t> CountParked(std::string_view flow) override;
  Result<std::vector<RunRow>> RunsWaitingFor(std::string_view flow, std::string_view name, std::string_view key,
                                             size_t limit) override;
  Result<std::vector<RunCount>> CountRunsByFlow(const std::vector<RunState>& states, size_t limit) override;
  Result<int64_t> AddRunEvent(const NewRunEvent& event) override;
  Result<std::optional<int64_t>> RunEventOfDelivery(std::string_view flow, std::string_view delivery_id) override;
  Result<std::optional<RunEvent>> TakeRunEvent(int64_t run_id, std::string_view flow, std::string_view name,
                                               std::string_view key, int64_t now_unix_us, int64_t activation_id,
                                               int64_t call_id) override;
  Result<size_t> CountPendingEvents(int64_t run_id) override;
  Result<size_t> CountPendingKeyedEvents(std::string_view flow) override;
  Result<std::vector<RunEvent>> RunEvents(int64_t run_id, size_t limit) override;
  Result<size_t> DropExpiredEvents(int64_t now_unix_us, size_t limit) override;
  Result<void> HoldQueuedRunsAs(std::string_view host_id) override;
  Result<std::vector<RunRow>> ClaimQueuedRuns(QueuedClaim which, size_t limit) override;
  Result<void> ReleaseHeldRun(int64_t run_id) override;
  Result<void> OfferQueuedRuns() override;
  Result<void> ListenForOffers(std::string_view host_id) override;
  Result<Heard> HeardFromHosts() override;
  Result<void> LeaveHosts() override;

  // ServeTables
  Result<int64_t> AddToken(std::string_view name, std::string_view token_hash, std::string_view scopes_json,
                           const Actor& by, int64_t at_unix_us) override;
  Result<std::optional<TokenRow>> FindToken(std::string_view token_hash) override;
  Result<void> RevokeToken(std::string_view name, const Actor& by, int64_t at_unix_us) override;
  Result<std::optional<int64_t>> ScheduleMark(std::string_view trigger) override;
  Result<void> SetScheduleMark(std::string_view trigger, int64_t fire_unix_us) override;

 protected:
  // JournalReads
  Result<Rows> Read(const std::string& name, const Params& params, const std::string& what) override {
    return Run(name, params, false, what);
  }
  Error NotFound(const std::string& message) const override { return StoreError(ErrorCode::kNotFound, message); }

 private:
  Error StoreError(ErrorCode code, const std::string& message) const {
    return MakeError(code, "store " + conn_->shown() + ": " + message);
  }
  Error Refused(const std::string& what, const pg::Outcome& o) const;
  Result<void> CheckBatchUsable() const;
  Result<void> BeginBatchIfNone();
  // A connection the server dropped (a restart, a failover, pg_terminate_backend) is made again
  // here, between batches, with a bounded backoff between attempts (kConnectBackoffMin doubling to
  // kConnectBackoffMax): while the server stays down, a store used in a busy loop tries to connect
  // a few times a second, not at every call. Nothing of ours is pending on a dropped connection.
  Result<void> EnsureConnected();
  // Whether the server's disk has room again, after a statement failed for the lack of it (class
  // 53): a rolled back insert into a new temporary table, which must grow a file by a few pages.
  Result<void> ProbeSpace();
  void NoteFailure(const std::string& sqlstate) const {
    if (sqlstate.rfind("53", 0) == 0) space_short_ = sqlstate;
  }
  // A commit's outcome as the store reports it.
  Result<void> CommitOutcome(const pg::Outcome& o) const;
  // Waits for the commit in flight and keeps its outcome for PollCommit; returns it.
  Result<void> WaitForFlight();
  // Whether a write may go without waiting: a commit is in flight (its answer not yet read).
  bool Behind() {
    if (!flight_) return false;
    conn_->Pump();
    return !conn_->Done(*flight_);
  }
  // A write sent without waiting for its answer, in the open batch (see Behind).
  Result<void> SendBehind(const std::string& name, const Params& params, const std::string& what);
  // One statement, waited for: a write joins the batch (opening it), a read runs in the batch when
  // one is open (it sees the batch's writes) or in a transaction of its own.
  Result<Rows> Run(const std::string& name, const Params& params, bool write, const std::string& what);
  Result<KvUpdate> KvWrite(const char* op, const std::string& ns, const std::string& key,
                           const std::optional<std::string>& expected, const std::string& value, int64_t by,
                           const KvLimits& limits);
  Result<std::optional<RunState>> RunStateOf(int64_t run_id);
  Result<ApprovalRow> InOwnTransaction(const char* what, const std::function<Result<ApprovalRow>()>& body);

  std::unique_ptr<pg::Connection> conn_;
  const std::string journal_id_;
  bool batch_open_ = false;                 // BEGIN went out for the open batch
  std::optional<std::string> batch_lost_;   // a statement of the open batch failed: it can only roll back
  bool needs_rollback_ = false;             // the server may hold a failed transaction of ours
  std::optional<uint64_t> flight_;          // the COMMIT in flight
  std::optional<Result<void>> flight_outcome_;  // its outcome, heard by a wait before PollCommit asked
  std::deque<int64_t> reserved_ids_;
  std::string holder_;         // HoldQueuedRunsAs: "" none (one host, or `basal run`)
  bool renew_holder_ = false;  // the holder's row is renewed with the leases (until LeaveHosts)
  std::string listen_as_;      // ListenForOffers: offers of this host id are its own, not heard
  int64_t server_lease_us_ = 0;  // > 0: several hosts, leases by the server's clock (UseServerClockLeases)

  // Closes the activations in `gone` as abandoned at `now_unix_us` and commits (RecoverAbandoned).
  // settle: their runs are settled in the same transaction (SettleRunsOfEndedActivations).
  Result<RecoveryReport> CloseAbandoned(const std::vector<ActivationRow>& gone, const ActivationOwner& self,
                                        int64_t now_unix_us, bool settle = false);
  static constexpr std::chrono::milliseconds kConnectBackoffMin{100}, kConnectBackoffMax{2000};
  // How long one use of the store waits for a connection under way (Connection::Reset's step):
  // the first use of an attempt long enough for a server that answers, even a loaded one, to
  // complete it at once; each later use (one per kConnectBackoffMin) briefly.
  static constexpr std::chrono::milliseconds kConnectFirstStep{250}, kConnectStep{20};
  std::chrono::milliseconds connect_backoff_{0};  // 0: the last attempt worked (or none failed)
  std::chrono::steady_clock::time_point next_connect_{};
  std::string connect_failed_;                    // why the last attempt failed
  mutable std::string space_short_;               // the SQLSTATE of a failure for lack of space, until a probe passes
};

Error PgStore::Refused(const std::string& what, const pg::Outcome& o) const {
  NoteFailure(o.sqlstate);
  std::string advice;
  switch (o.failure) {
    case Failure::kConnection:
      advice = "; the store connects again by itself (docs/postgres.md, \"Faults\")";
      break;
    case Failure::kAborted:
      advice = "; an earlier statement of the batch failed: call Rollback() and fail every answer of the batch";
      break;
    default:
      break;
  }
  return StoreError(ErrorCode::kDatabase, what + ": " + o.error + advice);
}

std::string PgStore::ForFlow(const Error& error) const {
  std::string message = error.message;
  const std::string prefix = "store " + conn_->shown() + ": ";
  if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  const std::string& shown = conn_->shown();
  for (size_t at = message.find(shown); at != std::string::npos; at = message.find(shown, at)) {
    message.replace(at, shown.size(), "the store");
  }
  return message;
}

Result<void> PgStore::CheckBatchUsable() const {
  if (batch_lost_) {
    return StoreError(ErrorCode::kDatabase, "the open batch failed (" + *batch_lost_ +
                                                "); call Rollback() and fail every answer that depended on the batch");
  }
  return Ok();
}

Result<void> PgStore::EnsureConnected() {
  if (!conn_->broken() || batch_open_ || flight_) return Ok();
  const auto now = std::chrono::steady_clock::now();
  if (connect_backoff_.count() > 0 && now < next_connect_) {
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_connect_ - now).count();
    return StoreError(ErrorCode::kIo, "the server cannot be reached (" + connect_failed_ + "); the next attempt to "
                                      "connect is in " + std::to_string(wait) + " ms");
  }
  if (!conn_->connecting()) {
    reserved_ids_.clear();
    needs_rollback_ = false;
    flight_outcome_.reset();
  }
  // The attempt goes on across uses of the store, each waiting a step at most, so a server whose
  // packets are dropped stalls the loop for a step now and then, not for connect_timeout.
  auto connected = conn_->Reset(conn_->connecting() ? kConnectStep : kConnectFirstStep);
  if (!connected) {
    connect_failed_ = connected.error().message;
    const std::string prefix = "store " + conn_->shown() + ": ";
    if (connect_failed_.rfind(prefix, 0) == 0) connect_failed_.erase(0, prefix.size());
    connect_backoff_ = std::min(kConnectBackoffMax, std::max(kConnectBackoffMin, connect_backoff_ * 2));
    next_connect_ = now + connect_backoff_;
    return connected.error();
  }
  if (!*connected) {
    // Under way: look again after the shortest backoff, without waiting in between.
    connect_failed_ = "connecting: the server has not completed the connection yet";
    connect_backoff_ = std::max(connect_backoff_, kConnectBackoffMin);
    next_connect_ = now + kConnectBackoffMin;
    return StoreError(ErrorCode::kIo, "the server has not completed the connection yet (the attempt goes on, up to the "
                                      "locator's connect_timeout; the store looks again in " +
                                          std::to_string(kConnectBackoffMin.count()) + " ms)");
  }
  connect_backoff_ = std::chrono::milliseconds(0);
  connect_failed_.clear();
  return Ok();
}

Result<void> PgStore::ProbeSpace() {
  conn_->Sync();  // ends whatever segment an earlier error left aborted
  conn_->Forget(conn_->SendSql("BEGIN"));
  const uint64_t create = conn_->SendSql("CREATE TEMPORARY TABLE basal_space_probe (v text) ON COMMIT DROP");
  // 64 rows of 1000 bytes, stored as they are (under the size PostgreSQL compresses): 8 new pages.
  const uint64_t insert =
      conn_->SendSql("INSERT INTO basal_space_probe SELECT repeat('x', 1000) FROM generate_series(1, 64)");
  conn_->Sync();
  const uint64_t rollback = conn_->SendSql("ROLLBACK");
  conn_->Sync();
  pg::Outcome made = conn_->Wait(create);
  pg::Outcome filled = conn_->Wait(insert);
  (void)conn_->Wait(rollback);
  const pg::Outcome& failed = made.failure != Failure::kNone ? made : filled;
  if (failed.failure == Failure::kNone) {
    space_short_.clear();
    return Ok();
  }
  if (failed.sqlstate.rfind("53", 0) == 0) {
    return StoreError(ErrorCode::kUnavailable, "the server is short of space or of a resource (" + failed.error +
                                                   "): commits fail until an operator frees space on the server's "
                                                   "disk (docs/postgres.md, \"Faults\")");
  }
  // The probe itself could not run (no TEMP privilege, a broken connection): it tells nothing of
  // the disk, and the next commit will.
  space_short_.clear();
  if (conn_->broken()) return StoreError(ErrorCode::kIo, "the connection to the server failed: " + failed.error);
  return Ok();
}

Result<void> PgStore::BeginBatchIfNone() {
  if (auto r = CheckBatchUsable(); !r) return r;
  if (batch_open_) return Ok();
  if (auto r = EnsureConnected(); !r) return r;
  // Not waited for: a BEGIN that fails makes the batch's first statement fail.
  conn_->Forget(conn_->SendSql("BEGIN"));
  batch_open_ = true;
  return Ok();
}

Result<Rows> PgStore::Run(const std::string& name, const Params& params, bool write, const std::string& what) {
  if (params.problem()) return StoreError(ErrorCode::kInvalidArgument, what + ": " + *params.problem());
  if (write) {
    if (auto r = BeginBatchIfNone(); !r) return r.error();
  } else if (auto r = CheckBatchUsable(); !r) {
    return r.error();
  } else if (auto c = EnsureConnected(); !c) {
    return c.error();
  }
  const uint64_t ticket = conn_->Send(name, params);
  // Inside the batch the server sends the answer when asked; alone, the statement is a
  // transaction of its own, which the sync point ends.
  if (batch_open_) {
    conn_->FlushRequest();
  } else {
    conn_->Sync();
  }
  pg::Outcome o = conn_->Wait(ticket);
  if (o.failure != Failure::kNone) {
    if (batch_open_) {
      batch_lost_ = o.error;
      needs_rollback_ = true;
    }
    return Refused(what, o);
  }
  return std::move(o.rows);
}

Result<void> PgStore::SendBehind(const std::string& name, const Params& params, const std::string& what) {
  if (params.problem()) return StoreError(ErrorCode::kInvalidArgument, what + ": " + *params.problem());
  if (auto r = BeginBatchIfNone(); !r) return r;
  conn_->Forget(conn_->Send(name, params));
  conn_->Flush();
  return Ok();
}

// ---- the batch ----

Result<void> PgStore::CommitOutcome(const pg::Outcome& o) const {
  // A COMMIT of a transaction that failed answers ROLLBACK, without an error.
  if (o.failure == Failure::kNone && o.command == "COMMIT") return Ok();
  NoteFailure(o.sqlstate.empty() ? conn_->last_failure_state() : o.sqlstate);
  const std::string why = o.failure == Failure::kNone ? "the server rolled the batch back" : o.error;
  return StoreError(ErrorCode::kDatabase,
                    "cannot commit the batch: " + why + "; call Rollback() and answer nothing from this batch");
}

Result<void> PgStore::WaitForFlight() {
  if (!flight_) return flight_outcome_ ? *flight_outcome_ : Ok();
  const Result<void> outcome = CommitOutcome(conn_->Wait(*flight_));
  flight_.reset();
  if (!outcome) needs_rollback_ = true;
  flight_outcome_ = outcome;
  return outcome;
}

Result<void> PgStore::Commit() {
  if (auto r = CheckBatchUsable(); !r) return r;
  if (auto flown = WaitForFlight(); !flown) return flown;
  if (!batch_open_) return Ok();
  const uint64_t ticket = conn_->SendSql("COMMIT");
  conn_->Sync();
  batch_open_ = false;
  Result<void> outcome = CommitOutcome(conn_->Wait(ticket));
  if (!outcome) {
    batch_lost_ = outcome.error().message;
    needs_rollback_ = true;
  }
  return outcome;
}

std::optional<Result<void>> PgStore::StartCommit() {
  if (flight_ || flight_outcome_) {
    return StoreError(ErrorCode::kInternal, "a commit is in flight already (a bug in the caller: poll it first)");
  }
  if (auto r = CheckBatchUsable(); !r) return r;
  if (!batch_open_) return Ok();
  flight_ = conn_->SendSql("COMMIT");
  conn_->Sync();
  batch_open_ = false;
  return std::nullopt;
}

std::optional<Result<void>> PgStore::PollCommit() {
  if (flight_outcome_) {
    std::optional<Result<void>> outcome = std::move(flight_outcome_);
    flight_outcome_.reset();
    return outcome;
  }
  if (!flight_) return std::nullopt;
  conn_->Pump();
  if (!conn_->Done(*flight_)) return std::nullopt;
  const Result<void> outcome = CommitOutcome(conn_->Take(*flight_));
  flight_.reset();
  if (!outcome) needs_rollback_ = true;
  return outcome;
}

Result<void> PgStore::Rollback() {
  const bool was_open = batch_open_ || needs_rollback_;
  batch_open_ = false;
  batch_lost_.reset();
  needs_rollback_ = false;
  if (conn_->broken()) {
    flight_.reset();
    flight_outcome_.reset();
    reserved_ids_.clear();
    return EnsureConnected();
  }
  if (!was_open) return Ok();
  // The first sync point ends a segment an error aborted; ROLLBACK then ends the transaction,
  // failed or not (with none open it only warns).
  conn_->Sync();
  const uint64_t ticket = conn_->SendSql("ROLLBACK");
  conn_->Sync();
  pg::Outcome o = conn_->Wait(ticket);
  if (o.failure != Failure::kNone) {
    needs_rollback_ = true;
    return Refused("cannot roll back the batch", o);
  }
  return Ok();
}

Result<void> PgStore::Check() {
  // An open batch or a commit in flight will tell how the server is; a check never waits on them.
  if (batch_open_ || flight_) {
    if (conn_->broken()) return StoreError(ErrorCode::kIo, "the connection to the server is broken");
    return Ok();
  }
  Result<Rows> rows = MakeError(ErrorCode::kIo, "not asked");
  // A connection found dropped only now (the server ended it while we were idle) is made again at
  // once: what it held is failed already, and nothing of ours is pending on it.
  for (int attempt = 0; attempt < 2; ++attempt) {
    rows = Run("writable", Params(), false, "cannot ask the server whether it takes writes");
    if (rows || !conn_->broken()) break;
  }
  if (!rows) return rows.error();
  if (rows->Bool(0, 0)) {
    return StoreError(ErrorCode::kUnavailable, "the server is a standby (in recovery): it takes no writes; point the "
                                               "locator at the primary (target_session_attrs=read-write)");
  }
  if (rows->Bool(0, 1)) {
    return StoreError(ErrorCode::kUnavailable,
                      "the session is read only (default_transaction_read_only): it takes no writes");
  }
  if (!space_short_.empty()) return ProbeSpace();
  return Ok();
}

// ---- JournalStore ----

Result<int64_t> PgStore::BeginActivation(const ActivationStart& a) {
  if (reserved_ids_.empty()) {
    auto rows = Run("reserve_ids", Params().Int(kReservedIds), false, "cannot draw activation ids");
    if (!rows) return rows.error();
    for (int i = 0; i < rows->rows(); ++i) reserved_ids_.push_back(rows->Int(i, 0));
    if (reserved_ids_.empty()) return StoreError(ErrorCode::kDatabase, "the activation id sequence gave nothing");
  }
  const int64_t id = reserved_ids_.front();
  Params p;
  p.Int(id).Text(a.flow).Text(a.source_hash).Text(a.manifest_hash).Text(a.run_id > 0 ? std::string() : a.input_json);
  p.Int(a.start_unix_us).Text(a.owner.host).Int(a.owner.pid).Int(a.owner.start_ticks).Int(a.lease_until_unix_us);
  p.Text(OriginName(a.origin));
  p.IntOrNull(a.approval_id > 0 ? std::optional<int64_t>(a.approval_id) : std::nullopt);
  p.TextOrNull(a.manifest_text_hash);
  p.IntOrNull(a.run_id > 0 ? std::optional<int64_t>(a.run_id) : std::nullopt);
  p.IntOrNull(a.retry_from_call > 0 ? std::optional<int64_t>(a.retry_from_call) : std::nullopt);
  p.Int(server_lease_us_);
  const std::string what = "cannot record the start of an activation of flow " + a.flow;
  if (Behind()) {
    if (auto r = SendBehind("insert_activation_behind", p, what); !r) return r.error();
  } else {
    auto rows = Run("insert_activation", p, true, what);
    if (!rows) return rows.error();
    if (rows->changed() != 1) {
      return StoreError(ErrorCode::kDatabase, what + ": it names approved version " + std::to_string(a.approval_id) +
                                                  ", which the store does not have");
    }
  }
  reserved_ids_.pop_front();
  return id;
}

Result<void> PgStore::RecordCall(const CallRecord& c) {
  const std::string what = "cannot record host call " + c.name + " (call id " + std::to_string(c.call_id) +
                           ") of activation " + std::to_string(c.activation_id);
  if (c.decision.reason.empty()) {
    return StoreError(ErrorCode::kDatabase, what + ": its decision has no reason (a bug in the caller)");
  }
  Params p;
  p.Int(c.activation_id).Int(c.call_id).Text(c.name).Text(c.args_json).Text(VerdictName(c.decision.verdict));
  p.Text(c.decision.rule).Text(c.decision.reason).Text(EffectName(c.effect)).Text(CallStateName(c.state));
  p.TextOrNull(c.result_json).TextOrNull(c.error_json).Int(c.start_unix_us).IntOrNull(c.end_unix_us);
  p.TextOrNull(c.args_digest).IntOrNull(c.answer_seq).TextOrNull(c.replay_json);
  const bool fenced = server_lease_us_ > 0;
  const std::string taken = what + ": activation " + std::to_string(c.activation_id) +
                            " has ended or was taken over by another host (its lease lapsed); nothing of it is written";
  if (Behind()) {
    if (!fenced) return SendBehind("insert_call_behind", p, what);
    p.Text(taken);
    return SendBehind("insert_call_fenced_behind", p, what);
  }
  auto rows = Run(fenced ? "insert_call_fenced" : "insert_call", p, true, what);
  if (!rows) return rows.error();
  if (fenced && rows->changed() != 1) {
    auto open = Run("call_state", Params().Int(c.activation_id).Int(c.call_id), false, what);
    if (open && open->rows() == 0) return StoreError(ErrorCode::kConflict, taken);
  }
  if (rows->changed() != 1) {
    return StoreError(ErrorCode::kDatabase,
                      what + ": it is recorded already, or the activation was never begun (a bug in the caller)");
  }
  return Ok();
}

Result<void> PgStore::UpdateCall(const CallUpdate& u) {
  const std::vector<const char*> from = PgAllowedFrom(u.state);
  auto from_at = [&](size_t i) { return from.empty() ? "" : from[std::min(i, from.size() - 1)]; };
  const std::string what = "cannot move host call " + std::to_string(u.call_id) + " of activation " +
                           std::to_string(u.activation_id) + " to " + CallStateName(u.state);
  Params p;
  p.Text(CallStateName(u.state)).TextOrNull(u.result_json).TextOrNull(u.error_json).IntOrNull(u.end_unix_us);
  p.IntOrNull(u.answer_seq).TextOrNull(u.replay_json).Int(u.activation_id).Int(u.call_id);
  p.Text(from_at(0)).Text(from_at(1)).Text(from_at(2));
  if (Behind()) {
    p.Text(what + ": no such record in a state that may become " + CallStateName(u.state));
    return SendBehind("update_call_behind", p, what);
  }
  auto rows = Run("update_call", p, true, what);
  if (!rows) return rows.error();
  if (rows->changed() == 1) return Ok();
  auto state = Run("call_state", Params().Int(u.activation_id).Int(u.call_id), false, what);
  if (!state) return state.error();
  if (state->rows() == 1) {
    return StoreError(ErrorCode::kInternal, "host call " + std::to_string(u.call_id) + " of activation " +
                                                std::to_string(u.activation_id) + " is " + state->Text(0, 0) +
                                                " and cannot become " + CallStateName(u.state) + " (a bug in the caller)");
  }
  return StoreError(ErrorCode::kNotFound, "has no record of host call " + std::to_string(u.call_id) +
                                              " of activation " + std::to_string(u.activation_id) +
                                              " (a bug in the caller)");
}

Result<void> PgStore::EndActivation(const ActivationEnd& e) {
  const std::string what = "cannot record the end of activation " + std::to_string(e.activation_id);
  Params p;
  p.Int(e.end_unix_us).Text(OutcomeName(e.outcome)).TextOrNull(e.result_json).TextOrNull(e.error_json);
  p.Int(e.cpu_us).Int(e.logs_dropped).Int(e.activation_id);
  if (Behind()) {
    p.Text(what + ": no unfinished activation " + std::to_string(e.activation_id));
    return SendBehind("end_activation_behind", p, what);
  }
  auto rows = Run("end_activation", p, true, what);
  if (!rows) return rows.error();
  if (rows->changed() != 1) {
    return StoreError(ErrorCode::kNotFound, "no unfinished activation " + std::to_string(e.activation_id) +
                                                " to end (unknown id, or already ended); a bug in the caller");
  }
  return Ok();
}

Result<void> PgStore::RenewLeases(const ActivationOwner& o, int64_t until_unix_us) {
  Params p;
  p.Int(until_unix_us).Text(o.host).Int(o.pid).Int(o.start_ticks);
  const std::string what = "cannot renew the leases of pid " + std::to_string(o.pid);
  if (Behind()) return SendBehind("renew_leases", p, what);
  auto rows = Run("renew_leases", p, true, what);
  if (!rows) return rows.error();
  return Ok();
}

Result<RecoveryReport> PgStore::RecoverAbandoned(const ActivationOwner& self, int64_t now_unix_us) {
  if (auto r = Commit(); !r) return r.error();
  auto unfinished = Run("unfinished", Params(), false, "cannot read the unfinished activations");
  if (!unfinished) return unfinished.error();
  std::vector<ActivationRow> gone;
  for (int i = 0; i < unfinished->rows(); ++i) {
    ActivationRow row = pg::ReadActivationRow(*unfinished, i);
    if (OwnerIsGone(row.owner, row.lease_until_unix_us, self, now_unix_us)) gone.push_back(std::move(row));
  }
  return CloseAbandoned(gone, self, now_unix_us);
}

Result<RecoveryReport> PgStore::CloseAbandoned(const std::vector<ActivationRow>& gone, const ActivationOwner& self,
                                               int64_t now_unix_us, bool settle) {
  RecoveryReport report;
  const std::string unknown_error = UnknownCallErrorJson();
  const std::string abandoned_error = AbandonedCallErrorJson();
  // Each activation closes once, whoever else recovers at the same time: only an unfinished one is
  // closed, and only the process that closed it moves its calls.
  for (const ActivationRow& a : gone) {
    const std::string id = std::to_string(a.id);
    auto closed = Run("close_activation",
                      Params().Int(now_unix_us).Text(AbandonedActivationErrorJson(a.owner, self, now_unix_us)).Int(a.id),
                      true, "cannot close abandoned activation " + id);
    if (!closed) {
      (void)Rollback();
      return closed.error();
    }
    if (closed->changed() != 1) continue;
    auto unknown = Run("calls_to_state", Params().Text("unknown").Text(unknown_error).Int(now_unix_us).Int(a.id).Text("started"),
                       true, "cannot close the calls of activation " + id);
    auto abandoned = unknown ? Run("calls_to_state",
                                   Params().Text("abandoned").Text(abandoned_error).Int(now_unix_us).Int(a.id).Text("decided"),
                                   true, "cannot close the calls of activation " + id)
                             : Result<Rows>(unknown.error());
    if (!abandoned) {
      (void)Rollback();
      return abandoned.error();
    }
    report.abandoned_activations.push_back(a.id);
    report.unknown_calls += static_cast<size_t>(unknown->changed());
    report.abandoned_calls += static_cast<size_t>(abandoned->changed());
  }
  if (settle && !report.abandoned_activations.empty()) {
    if (auto settled = SettleRunsOfEndedActivations(now_unix_us); !settled) {
      (void)Rollback();
      return settled.error();
    }
  }
  if (auto r = Commit(); !r) {
    (void)Rollback();
    return r.error();
  }
  return report;
}

// ---- several hosts ----

Result<void> PgStore::UseServerClockLeases(std::chrono::milliseconds lease) {
  if (lease.count() < 1) return StoreError(ErrorCode::kInvalidArgument, "a lease must be at least 1 ms");
  server_lease_us_ = static_cast<int64_t>(lease.count()) * 1000;
  return Ok();
}

Result<std::vector<int64_t>> PgStore::RenewAndCheckLeases(const ActivationOwner& o, const std::vector<int64_t>& held) {
  if (server_lease_us_ <= 0) return StoreError(ErrorCode::kInvalidArgument, "UseServerClockLeases was not called");
  const std::string what = "cannot renew the leases of " + o.host + " pid " + std::to_string(o.pid);
  const Params renew = Params().Int(server_lease_us_).Text(o.host).Int(o.pid).Int(o.start_ticks).TextOrNull(
      renew_holder_ ? holder_ : std::string());
  if (Behind()) {
    if (auto r = SendBehind("renew_leases_server_clock", renew, what); !r) return r.error();
  } else if (auto r = Run("renew_leases_server_clock", renew, true, what); !r) {
    return r.error();
  }
  std::vector<int64_t> taken;
  if (held.empty()) return taken;
  std::string ids = "{";
  for (size_t i = 0; i < held.size(); ++i) ids += (i ? "," : "") + std::to_string(held[i]);
  ids += "}";
  auto rows = Run("taken_over", Params().Text(ids), false, what);
  if (!rows) return rows.error();
  for (int i = 0; i < rows->rows(); ++i) taken.push_back(rows->Int(i, 0));
  return taken;
}

Result<RecoveryReport> PgStore::TakeExpiredLeases(const ActivationOwner& self) {
  if (auto r = Commit(); !r) return r.error();
  auto now = Run("server_now", Params(), false, "cannot read the server's clock");
  if (!now) return now.error();
  const int64_t now_us = now->Int(0, 0);
  auto unfinished = Run("unfinished_lapsed", Params().Int(now_us).Text(self.host), false,
                        "cannot read the unfinished activations");
  if (!unfinished) return unfinished.error();
  std::vector<ActivationRow> gone;
  for (int i = 0; i < unfinished->rows(); ++i) {
    ActivationRow row = pg::ReadActivationRow(*unfinished, i);
    const bool is_self = row.owner.host == self.host && row.owner.pid == self.pid &&
                         row.owner.start_ticks == self.start_ticks;
    if (is_self) continue;
    // A lease that lapsed is lost whoever holds it (a paused host too); a dead process on this
    // machine is gone at once.
    if (row.lease_until_unix_us < now_us ||
        (row.owner.host == self.host && OwnerIsGone(row.owner, row.lease_until_unix_us, self, now_us)))
      gone.push_back(std::move(row));
  }
  if (gone.empty()) return RecoveryReport{};
  // A takeover never waits long for a row its owner's open batch holds: that owner may itself be
  // waiting for this process (a kv lock held by this process's open batch), a cycle the server
  // cannot see. Past the timeout the takeover fails and is tried again at the next heartbeat.
  if (auto r = Run("takeover_lock_timeout", Params(), true, "cannot begin a takeover"); !r) {
    (void)Rollback();
    return r.error();
  }
  return CloseAbandoned(gone, self, now_us, /*settle=*/true);
}

Result<void> PgStore::HoldQueuedRunsAs(std::string_view host_id) {
  if (host_id.empty()) return StoreError(ErrorCode::kInvalidArgument, "a host holding queued runs needs an id");
  if (server_lease_us_ <= 0) return StoreError(ErrorCode::kInvalidArgument, "UseServerClockLeases was not called");
  holder_ = std::string(host_id);
  renew_holder_ = true;
  auto r = Run("register_host", Params().Text(holder_).Int(server_lease_us_), true, "cannot register host " + holder_);
  if (!r) return r.error();
  return Ok();
}

Result<std::vector<RunRow>> PgStore::ClaimQueuedRuns(QueuedClaim which, size_t limit) {
  std::vector<RunRow> out;
  if (holder_.empty()) return StoreError(ErrorCode::kInvalidArgument, "HoldQueuedRunsAs was not called");
  if (limit == 0) return out;
  const int64_t mode = which == QueuedClaim::kLapsed ? 0 : which == QueuedClaim::kSpare ? 1 : 2;
  auto rows = Run("claim_queued", Params().Text(holder_).Int(mode).IntOrNull(pg::LimitParam(limit)), true,
                  "cannot claim queued runs for host " + holder_);
  if (!rows) return rows.error();
  for (int i = 0; i < rows->rows(); ++i) out.push_back(pg::ReadRunRow(*rows, i));
  // Their former holders (if alive) drop them from their queues when this batch commits:
  // "HOST:ID,ID,...", each notification under PostgreSQL's 8000-byte payload limit.
  std::string payload;
  auto tell = [&]() -> Result<void> {
    if (payload.empty()) return Ok();
    auto sent = SendBehind("notify_taken", Params().Text(holder_ + ":" + payload), "cannot tell the runs claimed");
    payload.clear();
    return sent;
  };
  for (const RunRow& r : out) {
    if (payload.size() > 7000) {
      if (auto t = tell(); !t) return t.error();
    }
    payload += (payload.empty() ? "" : ",") + std::to_string(r.id);
  }
  if (auto t = tell(); !t) return t.error();
  return out;
}

Result<void> PgStore::ReleaseHeldRun(int64_t run_id) {
  if (holder_.empty()) return Ok();
  return SendBehind("release_held", Params().Int(run_id), "cannot release held run " + std::to_string(run_id));
}

Result<void> PgStore::OfferQueuedRuns() {
  if (holder_.empty()) return Ok();
  return SendBehind("notify_queued", Params().Text(holder_), "cannot offer the runs queued on host " + holder_);
}

Result<void> PgStore::ListenForOffers(std::string_view host_id) {
  if (auto r = CheckBatchUsable(); !r) return r;
  if (batch_open_ || flight_) return StoreError(ErrorCode::kInvalidArgument, "LISTEN needs a store with no batch");
  if (auto c = EnsureConnected(); !c) return c;
  listen_as_ = std::string(host_id);
  // Kept in the session: a connection made again listens again.
  for (const char* sql : {"LISTEN basal_queued_runs", "LISTEN basal_taken_runs"}) {
    if (auto r = conn_->AddToSession(sql); !r)
      return StoreError(ErrorCode::kDatabase, "cannot listen to the other hosts: " + r.error().message);
  }
  return Ok();
}

Result<RunStore::Heard> PgStore::HeardFromHosts() {
  auto notes = conn_->TakeNotifications();
  if (!notes) return StoreError(ErrorCode::kDatabase, notes.error().message);
  Heard heard;
  for (const auto& [channel, payload] : *notes) {
    if (channel == "basal_queued_runs") {
      if (payload != listen_as_) heard.offered = true;
      continue;
    }
    // basal_taken_runs: "HOST:ID,ID,..." (this host's own claims are not news).
    const size_t colon = payload.find(':');
    if (colon == std::string::npos || payload.compare(0, colon, listen_as_) == 0) continue;
    size_t at = colon + 1;
    while (at < payload.size()) {
      size_t end = payload.find(',', at);
      if (end == std::string::npos) end = payload.size();
      const int64_t id = std::strtoll(payload.c_str() + at, nullptr, 10);
      if (id > 0) heard.taken.push_back(id);
      at = end + 1;
    }
  }
  return heard;
}

Result<void> PgStore::LeaveHosts() {
  if (holder_.empty() || !renew_holder_) return Ok();
  renew_holder_ = false;
  auto r = Run("leave_hosts", Params().Text(holder_), true, "cannot end host " + holder_ + "'s row");
  if (!r) return r.error();
  return Ok();
}

// ---- KvStore ----

Result<std::optional<std::string>> PgStore::Get(const std::string& ns, const std::string& key) {
  auto rows = Run("kv_get", Params().Bytes(ns).Bytes(key), false, "cannot read kv key in namespace " + ns);
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<std::string>();
  return std::optional<std::string>(rows->Text(0, 0));
}

Result<void> PgStore::Put(const std::string& ns, const std::string& key, const std::string& value_json) {
  auto rows = Run("kv_put", Params().Bytes(ns).Bytes(key).Text(value_json), true, "cannot write kv key in namespace " + ns);
  if (!rows) return rows.error();
  return Ok();
}

Result<bool> PgStore::Delete(const std::string& ns, const std::string& key) {
  auto rows = Run("kv_delete", Params().Bytes(ns).Bytes(key), true, "cannot delete kv key in namespace " + ns);
  if (!rows) return rows.error();
  return rows->Bool(0, 0);
}

Result<KvList> PgStore::List(const std::string& ns, const std::string& prefix, size_t limit, size_t max_bytes) {
  KvList out;
  if (limit == 0) return out;
  // A byte range, not LIKE: no wildcard in a key can widen the match, and the index serves it.
  std::optional<std::string> upper;
  for (std::string s = prefix; !s.empty(); s.pop_back()) {
    if (static_cast<unsigned char>(s.back()) != 0xFF) {
      s.back() = static_cast<char>(static_cast<unsigned char>(s.back()) + 1);
      upper = s;
      break;
    }
  }
  Params p;
  p.Bytes(ns).Bytes(prefix);
  if (upper) {
    p.Bytes(*upper);
  } else {
    p.Null();
  }
  p.IntOrNull(pg::LimitParam(limit)).Text(std::to_string(max_bytes));
  auto rows = Run("kv_list", p, false, "cannot list kv keys in namespace " + ns);
  if (!rows) return rows.error();
  for (int i = 0; i < rows->rows(); ++i) {
    if (static_cast<uint64_t>(rows->Int(i, 2)) > max_bytes) {
      out.stopped_at_bytes = true;
      break;
    }
    out.entries.push_back(KvEntry{rows->Bytes(i, 0), rows->Text(i, 1)});
  }
  return out;
}

Result<KvUsage> PgStore::Usage(const std::string& ns) {
  auto rows = Run("kv_usage", Params().Bytes(ns), false, "cannot read the usage of kv namespace " + ns);
  if (!rows) return rows.error();
  KvUsage usage;
  if (rows->rows() == 1) {
    usage.bytes = static_cast<uint64_t>(rows->Int(0, 0));
    usage.keys = static_cast<uint64_t>(rows->Int(0, 1));
  }
  return usage;
}

Result<std::optional<uint64_t>> PgStore::ValueBytes(const std::string& ns, const std::string& key) {
  auto rows = Run("kv_value_bytes", Params().Bytes(ns).Bytes(key), false, "cannot read kv key in namespace " + ns);
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<uint64_t>();
  return std::optional<uint64_t>(static_cast<uint64_t>(rows->Int(0, 0)));
}

Result<KvUpdate> PgStore::KvWrite(const char* op, const std::string& ns, const std::string& key,
                                  const std::optional<std::string>& expected, const std::string& value, int64_t by,
                                  const KvLimits& limits) {
  Params p;
  p.Text(op).Bytes(ns).Bytes(key);
  if (expected) {
    p.Text(*expected);
  } else {
    p.Null();
  }
  p.Text(value).Int(by).Text(LimitText(limits.max_value_bytes)).Text(LimitText(limits.quota_bytes));
  p.Text(LimitText(limits.quota_keys));
  auto rows = Run("kv_write", p, true, std::string("cannot write kv key in namespace ") + ns);
  if (!rows) return rows.error();
  const std::string status = rows->Text(0, 0);
  if (status == "not_json") {
    return StoreError(ErrorCode::kDatabase, "a kv value in namespace " + ns +
                                                " is not JSON (was the database changed by hand?); put a JSON value "
                                                "under that key or delete it");
  }
  KvUpdate update;
  using S = KvUpdate::Status;
  if (status == "written") {
    update.status = S::kWritten;
  } else if (status == "mismatch") {
    update.status = S::kMismatch;
  } else if (status == "not_an_integer") {
    update.status = S::kNotAnInteger;
  } else if (status == "out_of_range") {
    update.status = S::kOutOfRange;
  } else if (status == "value_too_large") {
    update.status = S::kValueTooLarge;
  } else if (status == "over_quota") {
    update.status = S::kOverQuota;
  } else {
    return StoreError(ErrorCode::kInternal, "basal.kv_write answered \"" + status + "\"");
  }
  if (!rows->IsNull(0, 1)) update.current_json = rows->Text(0, 1);
  update.value_bytes = static_cast<uint64_t>(rows->Int(0, 2));
  update.usage_after.bytes = static_cast<uint64_t>(rows->Int(0, 3));
  update.usage_after.keys = static_cast<uint64_t>(rows->Int(0, 4));
  return update;
}

Result<KvUpdate> PgStore::PutWithin(const std::string& ns, const std::string& key, const std::string& value_json,
                                    const KvLimits& limits) {
  KvUpdate update;
  if (value_json.size() > limits.max_value_bytes) {
    update.status = KvUpdate::Status::kValueTooLarge;
    update.value_bytes = value_json.size();
    return update;
  }
  auto written = KvWrite("put", ns, key, std::nullopt, value_json, 0, limits);
  if (written) written->current_json.reset();
  return written;
}

Result<KvUpdate> PgStore::CompareAndSwap(const std::string& ns, const std::string& key,
                                         const std::optional<std::string>& expected_json, const std::string& value_json,
                                         const KvLimits& limits) {
  const Json expected = expected_json ? Json::parse(*expected_json, nullptr, /*allow_exceptions=*/false) : Json();
  if (expected.is_discarded() || Json::parse(value_json, nullptr, false).is_discarded()) {
    return MakeError(ErrorCode::kInvalidArgument, "CompareAndSwap of kv key in namespace " + ns +
                                                      ": the expected value or the new value is not JSON (a bug in "
                                                      "the caller, which must validate both)");
  }
  if (value_json.size() > limits.max_value_bytes) {
    KvUpdate update;
    update.status = KvUpdate::Status::kValueTooLarge;
    update.value_bytes = value_json.size();
    return update;
  }
  return KvWrite("cas", ns, key, expected_json, value_json, 0, limits);
}

Result<KvUpdate> PgStore::Increment(const std::string& ns, const std::string& key, int64_t by, const KvLimits& limits) {
  if (by > kKvMaxSafeInteger || by < -kKvMaxSafeInteger) {
    return MakeError(ErrorCode::kInvalidArgument, "Increment of kv key in namespace " + ns + " by " +
                                                      std::to_string(by) + ": outside +-" +
                                                      std::to_string(kKvMaxSafeInteger) + " (a bug in the caller)");
  }
  return KvWrite("incr", ns, key, std::nullopt, "", by, limits);
}

// ---- Catalog ----

Result<void> PgStore::KeepText(const std::string& hash, std::string_view text) {
  if (hash.rfind("sha256:", 0) != 0) {
    return MakeError(ErrorCode::kInvalidArgument, "a kept text's hash must be \"sha256:<hex>\" (got " + hash + ")");
  }
  Params p;
  p.Text(hash).Bytes(text);
  const std::string what = "cannot keep the text " + hash;
  if (Behind()) return SendBehind("keep_text", p, what);
  auto rows = Run("keep_text", p, true, what);
  if (!rows) return rows.error();
  return Ok();
}

Result<bool> PgStore::IsRevoked(int64_t approval_id) {
  auto rows = Run("is_revoked", Params().Int(approval_id), false,
                  "cannot read whether approval " + std::to_string(approval_id) + " is revoked");
  if (!rows) return rows.error();
  if (rows->rows() == 0) {
    return StoreError(ErrorCode::kNotFound, "has no approved version with id " + std::to_string(approval_id));
  }
  return rows->Bool(0, 0);
}

Result<ApprovalRow> PgStore::InOwnTransaction(const char* what, const std::function<Result<ApprovalRow>()>& body) {
  if (batch_open_) {
    return MakeError(ErrorCode::kInvalidArgument,
                     std::string(what) + ": a batch is open; commit it first (approvals commit on their own)");
  }
  if (auto flown = WaitForFlight(); !flown) return flown.error();
  // The table lock makes one approval or revocation at a time, across processes: what is read
  // below is what the write replaces.
  auto locked = Run("lock_approvals", Params(), true, std::string(what) + ": cannot lock the approvals");
  Result<ApprovalRow> done = locked ? body() : Result<ApprovalRow>(locked.error());
  if (done) {
    if (auto c = Commit(); !c) done = c.error();
  }
  if (!done) (void)Rollback();
  return done;
}

Result<ApprovalRow> PgStore::Approve(const NewApproval& a) {
  const bool flow = a.kind == ApprovalKind::kFlow;
  if (flow != a.source.has_value()) {
    return MakeError(ErrorCode::kInvalidArgument,
                     flow ? "approve: a flow needs its source" : "approve: a codemode policy has no source");
  }
  return InOwnTransaction("approve", [&]() -> Result<ApprovalRow> {
    auto versions = Versions(a.kind, a.name);
    if (!versions) return versions.error();
    const int64_t newest = versions->empty() ? 0 : versions->back().version;
    const bool newest_revoked = !versions->empty() && versions->back().revoked_unix_us.has_value();
    if (newest != a.reviewed_version || (newest > 0 && newest_revoked != a.reviewed_revoked)) {
      return MakeError(ErrorCode::kConflict,
                       std::string(ApprovalKindName(a.kind)) + " " + a.name + " changed while it was reviewed (its newest " +
                           "version is now " + std::to_string(newest) + (newest_revoked ? ", revoked" : "") +
                           "; the review was of version " + std::to_string(a.reviewed_version) +
                           "): nothing was stored; review and approve again");
    }
    const std::string manifest_text_hash = Sha256Hex(a.manifest_text);
    std::string source_hash;
    if (flow) {
      source_hash = Sha256Hex(*a.source);
      if (auto r = KeepText(source_hash, *a.source); !r) return r.error();
    }
    if (auto r = KeepText(manifest_text_hash, a.manifest_text); !r) return r.error();
    Params p;
    p.Text(ApprovalKindName(a.kind)).Text(a.name).TextOrNull(source_hash).Text(manifest_text_hash).Text(a.manifest_hash);
    p.Int(a.approver.uid).Text(a.approver.name).Int(a.at_unix_us).Text(a.note);
    auto inserted = Run("insert_approval", p, true, "cannot store the approval of " + a.name);
    if (!inserted) return inserted.error();
    const int64_t id = inserted->Int(0, 0);
    Json detail = {{"note", a.note}, {"manifest_text_hash", manifest_text_hash}, {"manifest_hash", a.manifest_hash}};
    if (flow) detail["source_hash"] = source_hash;
    if (!a.review_json.empty()) {
      Json review = Json::parse(a.review_json, nullptr, false);
      detail["review"] = review.is_discarded() ? Json(a.review_json) : review;
    }
    Params e;
    e.Int(a.at_unix_us).Text("approved").Int(id).Int(a.approver.uid).Text(a.approver.name);
    e.Text(detail.dump(-1, ' ', false, Json::error_handler_t::replace));
    if (auto r = Run("insert_event", e, true, "cannot record the approval event of " + a.name); !r) return r.error();
    auto row = Approval(id);
    if (!row) return row.error();
    if (!*row) return MakeError(ErrorCode::kInternal, "approve: the stored version cannot be read back");
    return **row;
  });
}

Result<ApprovalRow> PgStore::Revoke(ApprovalKind kind, const std::string& name, int64_t version, const Actor& by,
                                    int64_t at_unix_us, const std::string& note) {
  return InOwnTransaction("revoke", [&]() -> Result<ApprovalRow> {
    auto versions = Versions(kind, name);
    if (!versions) return versions.error();
    const ApprovalRow* found = nullptr;
    for (const ApprovalRow& v : *versions) {
      if (v.version == version) found = &v;
    }
    const std::string what = std::string(ApprovalKindName(kind)) + " " + name;
    if (versions->empty()) {
      return MakeError(ErrorCode::kNotFound, what + " has no approved version; `basal " + ApprovalKindName(kind) +
                                                 " list` shows what is approved");
    }
    if (!found) {
      return MakeError(ErrorCode::kNotFound, what + " has no version " + std::to_string(version) + " (versions 1 to " +
                                                 std::to_string(versions->back().version) + ")");
    }
    if (found->revoked_unix_us) {
      return MakeError(ErrorCode::kConflict, what + " version " + std::to_string(version) +
                                                 " is already revoked (by " + found->revoker.name + "); nothing changed");
    }
    const int64_t id = found->id;
    auto changed = Run("revoke_approval", Params().Int(at_unix_us).Int(by.uid).Text(by.name).Text(note).Int(id), true,
                       "cannot revoke " + what);
    if (!changed) return changed.error();
    Json detail = {{"note", note}};
    Params e;
    e.Int(at_unix_us).Text("revoked").Int(id).Int(by.uid).Text(by.name);
    e.Text(detail.dump(-1, ' ', false, Json::error_handler_t::replace));
    if (auto r = Run("insert_event", e, true, "cannot record the revocation event of " + name); !r) return r.error();
    auto row = Approval(id);
    if (!row) return row.error();
    if (!*row) return MakeError(ErrorCode::kInternal, "revoke: the version cannot be read back");
    return **row;
  });
}

// ---- RunStore ----

Result<std::optional<RunState>> PgStore::RunStateOf(int64_t run_id) {
  // FOR UPDATE: the state read is the one the following write replaces.
  auto rows = Run("run_state", Params().Int(run_id), true, "cannot read the state of run " + std::to_string(run_id));
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<RunState>();
  return std::optional<RunState>(ParseRunState(rows->Text(0, 0)).value_or(RunState::kEnded));
}

Result<EnqueueResult> PgStore::EnqueueRun(const NewRun& run) {
  const bool keyed = !run.idempotency_key.empty();
  // A key another process inserts between our read and our insert makes the insert do nothing
  // (ON CONFLICT, after waiting for that process's batch): the key is read again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (keyed) {
      auto earlier = Run("run_by_key", Params().Text(run.flow).Text(run.idempotency_key), true,
                         "cannot read the idempotency key of a run of flow " + run.flow);
      if (!earlier) return earlier.error();
      if (earlier->rows() == 1) {
        const int64_t id = earlier->Int(0, 0);
        if (earlier->Int(0, 2) > run.created_unix_us) {
          if (earlier->Text(0, 1) != run.input_json) {
            return MakeError(ErrorCode::kConflict,
                             "idempotency key \"" + run.idempotency_key + "\" of flow " + run.flow + " was used for run " +
                                 std::to_string(id) + " with another input; send a new key for a new request, or the "
                                 "same input to get run " + std::to_string(id));
          }
          auto row = GetRun(id);
          if (!row) return row.error();
          if (!*row) return MakeError(ErrorCode::kInternal, "run " + std::to_string(id) + " cannot be read back");
          return EnqueueResult{std::move(**row), true};
        }
        // Expired: forgotten, so the unique index admits the new run.
        if (auto cleared = Run("clear_run_key", Params().Int(id), true,
                               "cannot clear the expired key of run " + std::to_string(id));
            !cleared)
          return cleared.error();
      }
    }
    Params p;
    p.Text(run.flow).Text(run.input_json).Text(run.trigger).Text(run.idempotency_key);
    p.IntOrNull(keyed ? std::optional<int64_t>(run.key_expires_unix_us) : std::nullopt);
    p.Int(run.created_unix_us).TextOrNull(run.state_detail).Int(run.durable ? 1 : 0);
    p.TextOrNull(holder_).Text(!holder_.empty() && run.held ? "true" : "false");
    auto inserted = Run("insert_run", p, true, "cannot record a run of flow " + run.flow);
    if (!inserted) return inserted.error();
    if (inserted->rows() == 0) continue;
    EnqueueResult result;
    RunRow& row = result.run;
    row.id = inserted->Int(0, 0);
    row.flow = run.flow;
    row.input_json = run.input_json;
    row.trigger = run.trigger;
    row.idempotency_key = run.idempotency_key;
    row.state = RunState::kQueued;
    row.created_unix_us = run.created_unix_us;
    row.state_detail = run.state_detail;
    row.durable = run.durable;
    return result;
  }
  return MakeError(ErrorCode::kConflict, "idempotency key \"" + run.idempotency_key + "\" of flow " + run.flow +
                                             " is being taken by another process; send the request again");
}

Result<void> PgStore::MarkRunStarted(int64_t run_id, int64_t activation_id, int64_t at_unix_us,
                                     const RunBinding& binding) {
  const std::string id = std::to_string(run_id);
  if (activation_id <= 0) {
    return MakeError(ErrorCode::kInvalidArgument, "run " + id + " cannot start without an activation (got activation id " +
                                                      std::to_string(activation_id) + "; a bug in the caller)");
  }
  const bool bound = !binding.source_hash.empty();
  auto text = [bound](Params& p, const std::string& v) -> Params& { return bound ? p.TextOrNull(v) : p.Null(); };
  Params p;
  p.Int(activation_id).Int(at_unix_us);
  p.IntOrNull(bound && binding.approval_id > 0 ? std::optional<int64_t>(binding.approval_id) : std::nullopt);
  text(p, binding.manifest_hash);
  text(p, binding.manifest_text_hash);
  text(p, binding.seed);
  p.IntOrNull(bound && !binding.seed.empty() ? std::optional<int64_t>(binding.clock_us) : std::nullopt);
  text(p, binding.source_hash);
  p.Int(run_id).TextOrNull(holder_);
  auto changed = Run("start_run", p, true, "cannot record the start of run " + id);
  if (!changed) return changed.error();
  if (changed->changed() == 1) return Ok();
  // Read without a lock: the row may be held by the batch that is taking it.
  auto state = Run("run_state_unlocked", Params().Int(run_id), false, "cannot read the state of run " + id);
  if (!state) return state.error();
  if (state->rows() == 0) return StoreError(ErrorCode::kNotFound, "has no run " + id + " to start");
  const std::string now = state->Text(0, 0);
  if (now == "queued") {
    // Another host took it while it waited here (its holder is that host now), or another
    // process's open batch holds its row and starts or ends it (if that batch fails, that process
    // queues it again): either way it does not start here.
    return MakeError(ErrorCode::kConflict, "run " + id + " was taken by another host, or is being started or ended by "
                                                         "another process's open batch, while it waited here: it is not started here");
  }
  return MakeError(ErrorCode::kConflict, "run " + id + " is " + now + ", not queued: it cannot start");
}

Result<void> PgStore::MarkRunEnded(int64_t run_id, std::string_view outcome, std::string_view error_json,
                                   int64_t at_unix_us) {
  const std::string id = std::to_string(run_id);
  const std::string name(outcome);
  if (Behind()) {
    // The state's rules are in the statement; it fails the batch if the run is not in a state that
    // may end with this outcome.
    Params p;
    p.Text(name).TextOrNull(error_json).Int(at_unix_us).Int(run_id);
    p.Text(ParseOutcome(name) ? "true" : "false");
    p.Text("cannot record the end of run " + id + " as " + name + ": no such run in a state that may end so");
    return SendBehind("end_run_behind", p, "cannot record the end of run " + id);
  }
  auto state = RunStateOf(run_id);
  if (!state) return state.error();
  if (!*state) return StoreError(ErrorCode::kNotFound, "has no run " + id + " to end");
  switch (**state) {
    case RunState::kEnded:
      return MakeError(ErrorCode::kConflict, "run " + id + " has already ended; it cannot end again as " + name);
    case RunState::kQueued:
      if (name != "cancelled" && name != "missed" && name != "skipped") {
        return MakeError(ErrorCode::kInvalidArgument, "run " + id + " is queued: it ends as cancelled, missed or " +
                                                          "skipped, not as \"" + name + "\" (a bug in the caller)");
      }
      break;
    case RunState::kRunning:
      if (!ParseOutcome(name)) {
        return MakeError(ErrorCode::kInvalidArgument, "run " + id + " is running: it ends with its activation's " +
                                                          "outcome, and \"" + name +
                                                          "\" is not an outcome name (a bug in the caller)");
      }
      break;
    case RunState::kSleeping:
    case RunState::kWaiting:
    case RunState::kRetrying:
      // Parked: the operator cancels it (a wake or an event resumes it; it never ends parked).
      if (name != "cancelled") {
        return MakeError(ErrorCode::kInvalidArgument, "run " + id + " is " + RunStateName(**state) +
                                                          ": it ends only as cancelled, not as \"" + name +
                                                          "\" (a bug in the caller)");
      }
      break;
    case RunState::kInterrupted:
    case RunState::kNeedsReconciliation:
      if (name != "cancelled" && name != "resume_exhausted" && !ParseOutcome(name)) {
        return MakeError(ErrorCode::kInvalidArgument, "run " + id + " is " + RunStateName(**state) +
                                                          ": it ends as cancelled, resume_exhausted or an outcome, "
                                                          "not as \"" + name + "\" (a bug in the caller)");
      }
      break;
  }
  auto changed = Run("end_run", Params().Text(name).TextOrNull(error_json).Int(at_unix_us).Int(run_id).Text(RunStateName(**state)),
                     true, "cannot record the end of run " + id);
  if (!changed) return changed.error();
  if (changed->changed() != 1) return MakeError(ErrorCode::kInternal, "run " + id + " changed under its row lock");
  return Ok();
}

Result<std::vector<RunRow>> PgStore::RunsInState(RunState state, size_t limit) {
  std::vector<RunRow> rows;
  if (limit == 0) return rows;
  auto got = Run("runs_in_state", Params().Text(RunStateName(state)).IntOrNull(pg::LimitParam(limit)), false,
                 std::string("cannot read the ") + RunStateName(state) + " runs");
  if (!got) return got.error();
  for (int i = 0; i < got->rows(); ++i) rows.push_back(pg::ReadRunRow(*got, i));
  return rows;
}

Result<size_t> PgStore::CountRuns(RunState state) {
  auto rows = Run("count_runs", Params().Text(RunStateName(state)), false,
                  std::string("cannot count the ") + RunStateName(state) + " runs");
  if (!rows) return rows.error();
  return static_cast<size_t>(rows->Int(0, 0));
}

Result<size_t> PgStore::SettleRunsOfEndedActivations(int64_t at_unix_us) {
  auto interrupted = Run("interrupt_runs", Params().Int(at_unix_us), true,
                         "cannot interrupt the durable runs of abandoned activations");
  if (!interrupted) return interrupted.error();
  auto settled = Run("settle_runs", Params().Int(at_unix_us), true, "cannot end the runs of ended activations");
  if (!settled) return settled.error();
  return static_cast<size_t>(interrupted->changed() + settled->changed());
}

Result<RunRow> PgStore::MoveRun(const RunMove& move) {
  const std::string id = std::to_string(move.run_id);
  if (!PgRunMoveAllowed(move.from, move.to)) {
    return MakeError(ErrorCode::kInvalidArgument, "run " + id + ": no move from " + RunStateName(move.from) + " to " +
                                                      RunStateName(move.to) + " (a bug in the caller)");
  }
  const bool parks = RunParked(move.to);
  if (parks && !move.wake_unix_us) {
    return MakeError(ErrorCode::kInvalidArgument, "run " + id + ": a move to " + RunStateName(move.to) +
                                                      " needs a wake time (a bug in the caller)");
  }
  if ((move.to == RunState::kWaiting) != !move.waiting_for.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "run " + id + ": only a waiting run names the event it waits for " +
                                                      "(a bug in the caller)");
  }
  Params p;
  p.Text(RunStateName(move.to)).TextOrNull(move.detail_json).Int(move.count_resume ? 1 : 0);
  p.Int(move.count_attempt ? 1 : 0).IntOrNull(parks ? move.wake_unix_us : std::nullopt);
  p.TextOrNull(move.waiting_for).TextOrNull(move.waiting_key).Int(move.run_id).Text(RunStateName(move.from));
  p.TextOrNull(holder_);
  auto changed = Run("move_run", p, true, "cannot move run " + id + " to " + RunStateName(move.to));
  if (!changed) return changed.error();
  auto row = GetRun(move.run_id);
  if (!row) return row.error();
  if (!*row) return StoreError(ErrorCode::kNotFound, "has no run " + id);
  if (changed->changed() != 1) {
    return MakeError(ErrorCode::kConflict, "run " + id + " is " + RunStateName((*row)->state) + ", not " +
                                               RunStateName(move.from) + ": it was not moved to " + RunStateName(move.to));
  }
  return std::move(**row);
}

// ---- parked runs and their events ----

namespace {

RunEvent ReadRunEvent(const Rows& r, int i) {
  RunEvent e;
  e.id = r.Int(i, 0);
  e.run_id = r.Int(i, 1);
  e.flow = r.Text(i, 2);
  e.name = r.Text(i, 3);
  e.event_key = r.Text(i, 4);
  e.payload_json = r.Text(i, 5);
  e.sender = r.Text(i, 6);
  e.received_unix_us = r.Int(i, 7);
  e.expires_unix_us = r.Int(i, 8);
  e.delivered_activation = r.Int(i, 9);
  e.delivered_call = r.Int(i, 10);
  e.delivered_unix_us = r.IntOrNull(i, 11);
  return e;
}

}  // namespace

Result<std::vector<RunRow>> PgStore::RunsDue(int64_t now_unix_us, size_t limit) {
  std::vector<RunRow> rows;
  if (limit == 0) return rows;
  auto got = Run("runs_due", Params().Int(now_unix_us).IntOrNull(pg::LimitParam(limit)), false,
                 "cannot read the parked runs that are due");
  if (!got) return got.error();
  for (int i = 0; i < got->rows(); ++i) rows.push_back(pg::ReadRunRow(*got, i));
  return rows;
}

Result<std::optional<int64_t>> PgStore::NextWake() {
  auto got = Run("next_wake", Params(), false, "cannot read the next wake time of the parked runs");
  if (!got) return got.error();
  return got->IntOrNull(0, 0);
}

Result<size_t> PgStore::CountParked(std::string_view flow) {
  auto got = flow.empty() ? Run("count_parked", Params(), false, "cannot count the parked runs")
                          : Run("count_parked_flow", Params().Text(flow), false, "cannot count the parked runs");
  if (!got) return got.error();
  return static_cast<size_t>(got->Int(0, 0));
}

Result<std::vector<RunRow>> PgStore::RunsWaitingFor(std::string_view flow, std::string_view name,
                                                    std::string_view key, size_t limit) {
  std::vector<RunRow> rows;
  if (limit == 0) return rows;
  auto got = Run("runs_waiting_for", Params().Text(flow).Text(name).Text(key).IntOrNull(pg::LimitParam(limit)), false,
                 "cannot read the runs waiting for an event");
  if (!got) return got.error();
  for (int i = 0; i < got->rows(); ++i) rows.push_back(pg::ReadRunRow(*got, i));
  return rows;
}

Result<std::vector<RunCount>> PgStore::CountRunsByFlow(const std::vector<RunState>& states, size_t limit) {
  std::vector<RunCount> out;
  if (states.empty() || limit == 0) return out;
  // An array literal of state names (fixed words: nothing to quote).
  std::string names = "{";
  for (size_t i = 0; i < states.size(); ++i) names += std::string(i ? "," : "") + RunStateName(states[i]);
  names += "}";
  auto got = Run("count_runs_by_flow", Params().Text(names).IntOrNull(pg::LimitParam(limit)), false,
                 "cannot count the runs by flow");
  if (!got) return got.error();
  for (int i = 0; i < got->rows(); ++i) {
    RunCount c;
    c.flow = got->Text(i, 0);
    c.state = ParseRunState(got->Text(i, 1)).value_or(RunState::kEnded);
    c.count = static_cast<size_t>(got->Int(i, 2));
    out.push_back(std::move(c));
  }
  return out;
}

Result<int64_t> PgStore::AddRunEvent(const NewRunEvent& e) {
  if (e.run_id <= 0 && e.event_key.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "an event names its run or carries a key (a bug in the caller)");
  }
  Params p;
  p.IntOrNull(e.run_id > 0 ? std::optional<int64_t>(e.run_id) : std::nullopt).Text(e.flow).Text(e.name);
  p.Text(e.event_key).Text(e.payload_json).Text(e.sender).Int(e.received_unix_us).Int(e.expires_unix_us);
  p.Text(e.delivery_id);
  auto rows = Run("insert_run_event", p, true, "cannot record event " + e.name + " of flow " + e.flow);
  if (!rows) return rows.error();
  // No row: another host made this delivery's event first (the unique index waited for its commit).
  if (rows->rows() == 0)
    return MakeError(ErrorCode::kConflict, "flow " + e.flow + " has an event of delivery " + e.delivery_id + " already");
  return rows->Int(0, 0);
}

Result<std::optional<int64_t>> PgStore::RunEventOfDelivery(std::string_view flow, std::string_view delivery_id) {
  Params p;
  p.Text(flow).Text(delivery_id);
  auto rows = Run("run_event_of_delivery", p, false, "cannot look up the event of delivery " + std::string(delivery_id));
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<int64_t>();
  return std::optional<int64_t>(rows->Int(0, 0));
}

Result<std::optional<RunEvent>> PgStore::TakeRunEvent(int64_t run_id, std::string_view flow, std::string_view name,
                                                      std::string_view key, int64_t now_unix_us,
                                                      int64_t activation_id, int64_t call_id) {
  Params p;
  p.Int(run_id).Text(name).Text(flow).Text(key).Int(now_unix_us).Int(activation_id).Int(call_id);
  // Twice at most: when another process took the event this statement found first (it waited for
  // that process's row lock, then saw the event delivered), the second look finds the next one.
  for (int look = 0; look < 2; ++look) {
    auto rows = Run("take_run_event", p, true, "cannot take an event of run " + std::to_string(run_id));
    if (!rows) return rows.error();
    if (rows->rows() == 1) return std::optional<RunEvent>(ReadRunEvent(*rows, 0));
  }
  return std::optional<RunEvent>();
}

Result<size_t> PgStore::CountPendingEvents(int64_t run_id) {
  auto got = Run("count_pending_events", Params().Int(run_id), false,
                 "cannot count the events of run " + std::to_string(run_id));
  if (!got) return got.error();
  return static_cast<size_t>(got->Int(0, 0));
}

Result<size_t> PgStore::CountPendingKeyedEvents(std::string_view flow) {
  auto got = Run("count_pending_keyed", Params().Text(flow), false,
                 "cannot count the keyed events of flow " + std::string(flow));
  if (!got) return got.error();
  return static_cast<size_t>(got->Int(0, 0));
}

Result<std::vector<RunEvent>> PgStore::RunEvents(int64_t run_id, size_t limit) {
  std::vector<RunEvent> out;
  if (limit == 0) return out;
  auto got = Run("run_events", Params().Int(run_id).IntOrNull(pg::LimitParam(limit)), false,
                 "cannot read the events of run " + std::to_string(run_id));
  if (!got) return got.error();
  for (int i = 0; i < got->rows(); ++i) out.push_back(ReadRunEvent(*got, i));
  return out;
}

Result<size_t> PgStore::DropExpiredEvents(int64_t now_unix_us, size_t limit) {
  if (limit == 0) return size_t{0};
  auto got = Run("drop_expired_events", Params().Int(now_unix_us).IntOrNull(pg::LimitParam(limit)), true,
                 "cannot drop the expired events");
  if (!got) return got.error();
  return static_cast<size_t>(got->changed());
}

Result<int64_t> PgStore::RecordOperatorWrite(const KvAuditEntry& e) {
  const bool put = e.op == KvAuditOp::kPut;
  if (put && e.value_sha256.empty())
    return MakeError(ErrorCode::kInvalidArgument, "an operator's kv put is journaled with its value's digest (a bug in the caller)");
  Params p;
  p.Int(e.at_unix_us).Int(e.actor.uid).Text(e.actor.name).Text(e.reason).Bytes(e.ns).Bytes(e.key);
  p.Text(KvAuditOpName(e.op)).TextOrNull(put ? e.value_sha256 : std::string());
  p.IntOrNull(put ? std::optional<int64_t>(static_cast<int64_t>(e.value_bytes)) : std::nullopt).Int(e.existed ? 1 : 0);
  auto rows = Run("insert_kv_audit", p, true, "cannot journal the operator's kv write in namespace " + e.ns);
  if (!rows) return rows.error();
  return rows->Int(0, 0);
}

Result<int64_t> PgStore::AddResolution(const CallResolution& r) {
  Params p;
  p.Int(r.run_id).Int(r.activation_id).Int(r.call_id).Text(ResolutionKindName(r.kind)).TextOrNull(r.value_json);
  p.Int(r.actor.uid).Text(r.actor.name).Int(r.at_unix_us).Text(r.note);
  auto rows = Run("insert_resolution", p, true,
                  "cannot record the resolution of call " + std::to_string(r.call_id) + " of run " + std::to_string(r.run_id));
  if (!rows) return rows.error();
  return rows->Int(0, 0);
}

// ---- ServeTables ----

Result<int64_t> PgStore::AddToken(std::string_view name, std::string_view token_hash, std::string_view scopes_json,
                                  const Actor& by, int64_t at_unix_us) {
  const std::string n(name);
  if (name.empty() || token_hash.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "an API token needs a name and a hash (a bug in the caller)");
  }
  Params p;
  p.Text(name).Text(token_hash).Text(scopes_json).Int(by.uid).Text(by.name).Int(at_unix_us);
  auto inserted = Run("insert_token", p, true, "cannot store API token " + n);
  if (!inserted) return inserted.error();
  if (inserted->rows() == 1) return inserted->Int(0, 0);
  // A unique index refused it (after any other process's batch holding the same name committed).
  auto same_name = Run("token_name_unrevoked", Params().Text(name), true, "cannot read the API tokens named " + n);
  if (!same_name) return same_name.error();
  if (same_name->rows() > 0) {
    return MakeError(ErrorCode::kConflict, "an API token named " + n + " exists; revoke it first (`basal token revoke " +
                                               n + "`) or choose another name");
  }
  auto same_hash = Run("token_hash_known", Params().Text(token_hash), true, "cannot read the API token hashes");
  if (!same_hash) return same_hash.error();
  return MakeError(ErrorCode::kConflict, "API token " + n + " has the hash of token " +
                                             (same_hash->rows() > 0 ? same_hash->Text(0, 0) : std::string("?")) +
                                             " (the same token twice: draw a new one at random)");
}

Result<std::optional<TokenRow>> PgStore::FindToken(std::string_view token_hash) {
  auto rows = Run("find_token", Params().Text(token_hash), false, "cannot look up an API token");
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<TokenRow>();
  return std::optional<TokenRow>(pg::ReadTokenRow(*rows, 0));
}

Result<void> PgStore::RevokeToken(std::string_view name, const Actor& by, int64_t at_unix_us) {
  const std::string n(name);
  auto rows = Run("revoke_token", Params().Int(at_unix_us).Int(by.uid).Text(by.name).Text(name), true,
                  "cannot revoke API token " + n);
  if (!rows) return rows.error();
  if (rows->changed() == 0) {
    return StoreError(ErrorCode::kNotFound, "has no unrevoked API token named " + n +
                                                "; `basal token list` shows the tokens");
  }
  return Ok();
}

Result<std::optional<int64_t>> PgStore::ScheduleMark(std::string_view trigger) {
  auto rows = Run("schedule_mark", Params().Text(trigger), false,
                  "cannot read the mark of schedule " + std::string(trigger));
  if (!rows) return rows.error();
  if (rows->rows() == 0) return std::optional<int64_t>();
  return std::optional<int64_t>(rows->Int(0, 0));
}

Result<void> PgStore::SetScheduleMark(std::string_view trigger, int64_t fire_unix_us) {
  Params p;
  p.Text(trigger).Int(fire_unix_us);
  const std::string what = "cannot record the mark of schedule " + std::string(trigger);
  if (Behind()) return SendBehind("set_schedule_mark", p, what);
  auto rows = Run("set_schedule_mark", p, true, what);
  if (!rows) return rows.error();
  return Ok();
}

// A read-only session: JournalReader's reads, nothing else.
class PgReader final : public pg::JournalReads {
 public:
  explicit PgReader(std::unique_ptr<pg::Connection> conn) : conn_(std::move(conn)) {}

 protected:
  Result<Rows> Read(const std::string& name, const Params& params, const std::string& what) override {
    if (params.problem()) {
      return MakeError(ErrorCode::kInvalidArgument, "store " + conn_->shown() + ": " + what + ": " + *params.problem());
    }
    const uint64_t ticket = conn_->Send(name, params);
    conn_->Sync();
    pg::Outcome o = conn_->Wait(ticket);
    if (o.failure != Failure::kNone) {
      return MakeError(ErrorCode::kDatabase, "store " + conn_->shown() + ": " + what + ": " + o.error);
    }
    return std::move(o.rows);
  }
  Error NotFound(const std::string& message) const override {
    return MakeError(ErrorCode::kNotFound, "store " + conn_->shown() + ": " + message);
  }

 private:
  std::unique_ptr<pg::Connection> conn_;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenPostgresStore(const PostgresStoreOptions& options) {
  auto journal_id = std::make_shared<std::string>();
  auto conn = Connect(options.uri, options.durability, false, Statements(), journal_id);
  if (!conn) return conn.error();
  std::string id = *journal_id;
  return std::unique_ptr<Store>(new PgStore(std::move(*conn), std::move(id)));
}

Result<std::unique_ptr<JournalReader>> OpenPostgresReader(const std::string& uri) {
  auto conn = Connect(uri, Durability::kNormal, true, pg::ReadStatements());
  if (!conn) return conn.error();
  return std::unique_ptr<JournalReader>(new PgReader(std::move(*conn)));
}

}  // namespace basal
