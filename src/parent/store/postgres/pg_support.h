// One libpq connection in pipeline mode, non-blocking, for the PostgreSQL store: statements are
// sent at once and their results read in order, by whoever needs them: a caller that waits
// (Wait: a synchronous round trip) or the owner's loop (Pump: never blocks). Also the parameters
// (Params), results (Rows) and error texts of the backend.
//
//   auto conn = Connection::Open(uri, shown, {"SET search_path = basal"});
//   uint64_t t = conn->Send("kv_get", Params().Bytes(ns).Bytes(key));
//   conn->FlushRequest();                       // inside a transaction: results without a Sync
//   Result<Rows> rows = conn->Wait(t);
//
// A statement's error aborts the rest of its pipeline segment (up to the next Sync): those
// statements answer kAborted with the first error's text. Loop thread only.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "basal/result.h"

namespace basal::pg {

// Parameters of one statement: text (NULL-free UTF-8, as PostgreSQL's text type needs), integers
// as decimal text, and bytes (bytea, sent in binary). A text that is not UTF-8 makes the statement
// refused before it is sent (`problem()`), so it cannot abort a batch.
class Params {
 public:
  Params& Text(std::string_view v);
  Params& TextOrNull(std::string_view v);  // "" is sent as NULL (a result or error absent)
  Params& Int(int64_t v);
  Params& IntOrNull(const std::optional<int64_t>& v);
  Params& Bytes(std::string_view v);
  Params& Null();
  int size() const { return static_cast<int>(values_.size()); }
  const std::optional<std::string>& problem() const { return problem_; }

 private:
  friend class Connection;
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<int> formats_;
  std::optional<std::string> problem_;
};

// One statement's result (its rows, or what it changed). Columns come as text; bytea as its hex
// text, which Bytes() decodes.
class Rows {
 public:
  Rows() = default;
  explicit Rows(PGresult* r) : r_(r, &PQclear) {}
  int rows() const { return r_ ? PQntuples(r_.get()) : 0; }
  bool IsNull(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  std::string Text(int row, int col) const;  // NULL reads as ""
  int64_t Int(int row, int col) const;       // NULL reads as 0
  std::optional<int64_t> IntOrNull(int row, int col) const;
  bool Bool(int row, int col) const;
  std::string Bytes(int row, int col) const;
  int64_t changed() const;  // rows an INSERT/UPDATE/DELETE touched

 private:
  std::shared_ptr<PGresult> r_;
};

// Whether `text` is UTF-8 without NUL (what a text parameter must be).
bool ValidUtf8(std::string_view text);

enum class Failure { kNone, kStatement, kAborted, kConnection };

// A finished statement: its rows, or why not.
struct Outcome {
  Failure failure = Failure::kNone;
  std::string error;  // "message (SQLSTATE 23505)"; for kAborted the segment's first error
  std::string sqlstate;
  Rows rows;
  std::string command;  // the command tag ("COMMIT", "ROLLBACK", "INSERT 0 1", ...)
};

// A prepared statement: name, SQL, and how many parameters it takes.
struct StatementDef {
  std::string name;
  std::string sql;
};

class Connection {
 public:
  // What runs on a new connection before its statements are prepared (the schema's check).
  using Setup = std::function<Result<void>(PGconn*)>;

  // Connects (waiting up to the locator's connect_timeout, 10 s unless it says otherwise), checks
  // the server (PostgreSQL 14 or newer, UTF8), runs `session` (each a statement) and `setup`,
  // prepares `statements`, and enters pipeline mode; a Reset does it all again. `shown` is the
  // locator without its password: what every message names.
  static Result<std::unique_ptr<Connection>> Open(const std::string& uri, const std::string& shown,
                                                  std::vector<std::string> session, Setup setup,
                                                  std::vector<StatementDef> statements);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues a prepared statement (by name) or a statement without parameters; returns its ticket.
  // Nothing waits: the bytes leave when the socket takes them (Flush, Pump, Wait).
  uint64_t Send(const std::string& name, const Params& params);
  uint64_t SendSql(const char* sql);
  // A sync point (ends the pipeline segment: an implicit transaction commits, an error stops
  // aborting); and a request for the server to send what it has without one.
  uint64_t Sync();
  void FlushRequest();

  // Blocks until `ticket` is done; its outcome (kept once: a ticket is taken once).
  Outcome Wait(uint64_t ticket);
  // Reads and sends what it can without blocking.
  void Pump();
  void Flush();
  bool Done(uint64_t ticket) const;
  // The outcome of a done ticket (Send keeps it until taken, unless forgotten; Sync's is not kept).
  Outcome Take(uint64_t ticket);
  // Its outcome will not be asked for: dropped when it arrives (errors still count for the segment).
  void Forget(uint64_t ticket);
  // Blocks until everything sent is answered.
  void Drain();

  bool broken() const;
  // Why the connection broke, as the server or libpq said it (the first reason heard), or "".
  const std::string& broken_why() const { return broken_why_; }
  // The SQLSTATE of the last statement that failed, its outcome taken or not ("" before any): a
  // batch whose failing statement went unwaited-for commits as ROLLBACK, without an error.
  const std::string& last_failure_state() const { return last_failure_state_; }
  int fd() const;
  bool want_write() const { return want_write_; }
  const std::string& shown() const { return shown_; }
  // Drops the connection and connects again (session and statements too). Everything pending
  // fails (kConnection). The connection is made without blocking (libpq's PQconnectStart): each
  // call waits at most `step` for the server, and answers false while the attempt goes on (the
  // next call carries it on, without dropping anything) and true once connected. The attempt
  // fails after the locator's connect_timeout (10 s unless it says otherwise), counted from its
  // start; a server that answers the handshake is then set up with blocking round trips, as at
  // Open. So a server whose packets are dropped holds the caller `step` at a time, not a whole
  // connect_timeout.
  Result<bool> Reset(std::chrono::milliseconds step);
  // Whether an attempt of Reset is under way (begun, neither connected nor failed yet).
  bool connecting() const { return connecting_; }
  // Whether the open transaction is in error (a statement failed and nothing rolled it back yet).
  bool InFailedTransaction() const;
  // Runs `sql` now (nothing else pending) and at every connection made again after (a LISTEN).
  Result<void> AddToSession(const std::string& sql);
  // Reads what the socket has without blocking and returns the notifications that arrived (channel,
  // payload); an error when the connection broke.
  Result<std::vector<std::pair<std::string, std::string>>> TakeNotifications();

 private:
  Connection(std::string uri, std::string shown, std::vector<std::string> session, Setup setup,
             std::vector<StatementDef> statements)
      : uri_(std::move(uri)),
        shown_(std::move(shown)),
        session_(std::move(session)),
        setup_(std::move(setup)),
        statements_(std::move(statements)) {}
  Result<void> Connect();
  // The libpq parameters of a connection: basal's defaults, the locator's, the encoding.
  PGconn* StartConnect() const;
  // Everything after the handshake: the server's version and encoding, the session, the setup,
  // the prepared statements, pipeline mode. Drops the connection on failure.
  Result<void> SetUpConnected();
  void FailAll(const std::string& why);
  bool ReadAvailable();  // processes what libpq has; false when the connection failed
  uint64_t Push(bool sync);
  void Finish(Outcome outcome);

  struct Pending {
    uint64_t ticket;
    bool sync;  // a sync point (answers PGRES_PIPELINE_SYNC, no NULL after it)
    bool keep;  // its outcome is kept for Take/Wait
    Outcome outcome;
    bool has_result = false;
  };
  const std::string uri_, shown_;
  std::vector<std::string> session_;
  const Setup setup_;
  const std::vector<StatementDef> statements_;
  PGconn* conn_ = nullptr;
  uint64_t next_ticket_ = 1;
  uint64_t flushed_through_ = 0;  // the last ticket a Sync or a flush request covers
  std::deque<Pending> pending_;
  std::map<uint64_t, Outcome> done_;
  std::string segment_error_, segment_state_;  // the current segment's first error
  bool want_write_ = false;
  bool lost_ = false;  // the server said it ends the session
  bool connecting_ = false;  // Reset's attempt is under way on conn_
  PostgresPollingStatusType connect_poll_ = PGRES_POLLING_WRITING;  // what the attempt waits for
  std::chrono::steady_clock::time_point connect_deadline_{};  // max() when connect_timeout is 0
  std::string broken_why_;
  std::string last_failure_state_;
};

// "message (SQLSTATE xxxxx)" of a result, or of the connection when there is no result.
std::string ErrorText(const PGresult* r, PGconn* conn);

}  // namespace basal::pg
