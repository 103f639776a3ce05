// The PostgreSQL store's connection in pipeline mode (see pg_support.h).
#include "parent/store/postgres/pg_support.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

namespace basal::pg {

bool ValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c == 0) return false;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    p += n + 1;
  }
  return true;
}

Params& Params::Text(std::string_view v) {
  if (!problem_ && !ValidUtf8(v)) {
    problem_ = "a text of " + std::to_string(v.size()) + " bytes is not UTF-8 (or holds a NUL byte), which "
               "PostgreSQL's text cannot hold";
  }
  values_.emplace_back(v);
  null_.push_back(false);
  formats_.push_back(0);
  return *this;
}

Params& Params::TextOrNull(std::string_view v) { return v.empty() ? Null() : Text(v); }

Params& Params::Int(int64_t v) {
  values_.push_back(std::to_string(v));
  null_.push_back(false);
  formats_.push_back(0);
  return *this;
}

Params& Params::IntOrNull(const std::optional<int64_t>& v) { return v ? Int(*v) : Null(); }

Params& Params::Bytes(std::string_view v) {
  values_.emplace_back(v);
  null_.push_back(false);
  formats_.push_back(1);
  return *this;
}

Params& Params::Null() {
  values_.emplace_back();
  null_.push_back(true);
  formats_.push_back(0);
  return *this;
}

std::string Rows::Text(int row, int col) const {
  if (IsNull(row, col)) return "";
  return std::string(PQgetvalue(r_.get(), row, col), static_cast<size_t>(PQgetlength(r_.get(), row, col)));
}

int64_t Rows::Int(int row, int col) const { return IntOrNull(row, col).value_or(0); }

std::optional<int64_t> Rows::IntOrNull(int row, int col) const {
  if (IsNull(row, col)) return std::nullopt;
  const char* text = PQgetvalue(r_.get(), row, col);
  const char* end = text + PQgetlength(r_.get(), row, col);
  int64_t v = 0;
  std::from_chars(text, end, v);
  return v;
}

bool Rows::Bool(int row, int col) const { return !IsNull(row, col) && PQgetvalue(r_.get(), row, col)[0] == 't'; }

std::string Rows::Bytes(int row, int col) const {
  if (IsNull(row, col)) return "";
  // bytea_output = hex (the session sets it): "\x" then two hex digits a byte.
  std::string_view hex(PQgetvalue(r_.get(), row, col), static_cast<size_t>(PQgetlength(r_.get(), row, col)));
  if (hex.size() >= 2 && hex[0] == '\\' && hex[1] == 'x') hex.remove_prefix(2);
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return 0;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1])));
  return out;
}

int64_t Rows::changed() const {
  if (!r_) return 0;
  const char* n = PQcmdTuples(r_.get());
  return n && *n ? std::strtoll(n, nullptr, 10) : 0;
}

std::string ErrorText(const PGresult* r, PGconn* conn) {
  std::string text;
  if (r) {
    const char* primary = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    const char* detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
    const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    if (primary) text = primary;
    if (detail) text += std::string(" (") + detail + ")";
    if (state) text += std::string(" (SQLSTATE ") + state + ")";
  }
  if (text.empty() && conn) text = PQerrorMessage(conn);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text.empty() ? "the server gave no reason" : text;
}

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& uri, const std::string& shown,
                                                     std::vector<std::string> session, Setup setup,
                                                     std::vector<StatementDef> statements) {
  std::unique_ptr<Connection> c(new Connection(uri, shown, std::move(session), std::move(setup), std::move(statements)));
  if (auto r = c->Connect(); !r) return r.error();
  return c;
}

Connection::~Connection() {
  if (conn_) PQfinish(conn_);
}

PGconn* Connection::StartConnect() const {
  // The locator's own values win over the defaults before it; the encoding after it is basal's.
  const char* keys[] = {"connect_timeout", "application_name", "dbname", "client_encoding", nullptr};
  const char* values[] = {"10", "basal", uri_.c_str(), "UTF8", nullptr};
  return PQconnectStartParams(keys, values, /*expand_dbname=*/1);
}

namespace {

constexpr const char* kCannotConnectAdvice =
    "check the locator, that the server runs and that it lets this user in (a password belongs in "
    "~/.pgpass or the file passfile= names, not on the command line; docs/postgres.md)";

// The connect_timeout a connection was made with, in seconds (0: none, as libpq reads it).
int ConnectTimeoutSeconds(PGconn* conn) {
  int seconds = 0;
  PQconninfoOption* options = PQconninfo(conn);
  for (PQconninfoOption* o = options; o && o->keyword; ++o) {
    if (std::string_view(o->keyword) == "connect_timeout" && o->val) seconds = std::atoi(o->val);
  }
  PQconninfoFree(options);
  return std::max(seconds, 0);
}

}  // namespace

Result<void> Connection::Connect() {
  // At Open nothing else waits for this process: the attempt may block, up to connect_timeout.
  for (;;) {
    auto step = Reset(std::chrono::hours(1));
    if (!step) return step.error();
    if (*step) return Ok();
  }
}

Result<bool> Connection::Reset(std::chrono::milliseconds step) {
  using std::chrono::steady_clock;
  auto fail = [&](const std::string& why) -> Error {
    connecting_ = false;
    if (conn_) {
      PQfinish(conn_);
      conn_ = nullptr;
    }
    return MakeError(ErrorCode::kIo, "store " + shown_ + ": cannot connect: " + why + "; " + kCannotConnectAdvice);
  };
  if (!connecting_) {
    if (conn_) {
      PQfinish(conn_);
      conn_ = nullptr;
    }
    FailAll("the connection was reset");
    done_.clear();
    want_write_ = false;
    lost_ = false;
    broken_why_.clear();
    conn_ = StartConnect();
    if (!conn_ || PQstatus(conn_) == CONNECTION_BAD) return fail(conn_ ? ErrorText(nullptr, conn_) : "out of memory");
    connecting_ = true;
    connect_poll_ = PGRES_POLLING_WRITING;  // libpq: wait until writable before the first poll
    const int timeout = ConnectTimeoutSeconds(conn_);
    connect_deadline_ = timeout > 0 ? steady_clock::now() + std::chrono::seconds(timeout) : steady_clock::time_point::max();
  }
  const auto now = steady_clock::now();
  const auto until = step >= std::chrono::hours(1) ? steady_clock::time_point::max() : now + step;
  for (;;) {
    const auto at = steady_clock::now();
    if (at >= connect_deadline_) {
      return fail("the server did not complete the connection within connect_timeout (" +
                  std::to_string(ConnectTimeoutSeconds(conn_)) + " s): is it reachable from here?");
    }
    const auto end = std::min(until, connect_deadline_);
    const int wait_ms = end == steady_clock::time_point::max()
                            ? -1
                            : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(std::max(end - at, steady_clock::duration(0))).count());
    pollfd p{PQsocket(conn_), static_cast<short>(connect_poll_ == PGRES_POLLING_READING ? POLLIN : POLLOUT), 0};
    const int ready = p.fd < 0 ? 1 : ::poll(&p, 1, wait_ms);
    if (ready < 0 && errno != EINTR) return fail(std::string("poll: ") + std::strerror(errno));
    if (ready <= 0) {
      if (steady_clock::now() >= until) return false;  // still under way: the next call goes on
      continue;
    }
    connect_poll_ = PQconnectPoll(conn_);
    if (connect_poll_ == PGRES_POLLING_FAILED) return fail(ErrorText(nullptr, conn_));
    if (connect_poll_ == PGRES_POLLING_OK) {
      connecting_ = false;
      if (auto r = SetUpConnected(); !r) return r.error();
      lost_ = false;
      broken_why_.clear();
      return true;
    }
  }
}

Result<void> Connection::SetUpConnected() {
  auto fail = [&](const std::string& what, const std::string& advice) -> Error {
    std::string why = conn_ ? ErrorText(nullptr, conn_) : "out of memory";
    if (conn_) {
      PQfinish(conn_);
      conn_ = nullptr;
    }
    return MakeError(ErrorCode::kIo, "store " + shown_ + ": " + what + ": " + why + "; " + advice);
  };
  if (PQserverVersion(conn_) < 140000) {
    const int version = PQserverVersion(conn_);
    PQfinish(conn_);
    conn_ = nullptr;
    return MakeError(ErrorCode::kDatabase, "store " + shown_ + ": the server is PostgreSQL " +
                                               std::to_string(version / 10000) + "; basal needs 14 or newer");
  }
  const char* encoding = PQparameterStatus(conn_, "server_encoding");
  if (!encoding || std::string_view(encoding) != "UTF8") {
    const std::string found = encoding ? encoding : "unknown";
    PQfinish(conn_);
    conn_ = nullptr;
    return MakeError(ErrorCode::kDatabase, "store " + shown_ + ": the database's encoding is " + found +
                                               "; basal needs UTF8 (CREATE DATABASE ... ENCODING 'UTF8')");
  }
  for (const std::string& sql : session_) {
    PGresult* r = PQexec(conn_, sql.c_str());
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    const std::string why = ok ? "" : ErrorText(r, conn_);
    PQclear(r);
    if (!ok) {
      PQfinish(conn_);
      conn_ = nullptr;
      return MakeError(ErrorCode::kDatabase, "store " + shown_ + ": \"" + sql + "\" failed: " + why);
    }
  }
  if (setup_) {
    if (auto r = setup_(conn_); !r) {
      PQfinish(conn_);
      conn_ = nullptr;
      return r;
    }
  }
  for (const StatementDef& s : statements_) {
    PGresult* r = PQprepare(conn_, s.name.c_str(), s.sql.c_str(), 0, nullptr);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    const std::string why = ok ? "" : ErrorText(r, conn_);
    PQclear(r);
    if (!ok) {
      PQfinish(conn_);
      conn_ = nullptr;
      return MakeError(ErrorCode::kDatabase,
                       "store " + shown_ + ": cannot prepare \"" + s.sql + "\": " + why +
                           " (is the database's schema older or newer than this basal? docs/postgres.md)");
    }
  }
  if (PQsetnonblocking(conn_, 1) != 0 || PQenterPipelineMode(conn_) != 1) {
    return fail("cannot enter pipeline mode", "libpq 14 or newer is needed");
  }
  return Ok();
}

bool Connection::broken() const { return lost_ || !conn_ || PQstatus(conn_) != CONNECTION_OK; }

int Connection::fd() const { return conn_ ? PQsocket(conn_) : -1; }

uint64_t Connection::Push(bool sync) {
  const uint64_t ticket = next_ticket_++;
  pending_.push_back(Pending{ticket, sync, !sync, {}, false});
  return ticket;
}

uint64_t Connection::Send(const std::string& name, const Params& params) {
  const uint64_t ticket = Push(false);
  std::vector<const char*> values;
  std::vector<int> lengths;
  for (size_t i = 0; i < params.values_.size(); ++i) {
    values.push_back(params.null_[i] ? nullptr : params.values_[i].data());
    lengths.push_back(static_cast<int>(params.values_[i].size()));
  }
  if (broken() || PQsendQueryPrepared(conn_, name.c_str(), params.size(), values.data(), lengths.data(),
                                      params.formats_.data(), 0) != 1) {
    FailAll(broken() ? ErrorText(nullptr, conn_) : "cannot send a statement: " + ErrorText(nullptr, conn_));
  }
  return ticket;
}

uint64_t Connection::SendSql(const char* sql) {
  const uint64_t ticket = Push(false);
  if (broken() || PQsendQueryParams(conn_, sql, 0, nullptr, nullptr, nullptr, nullptr, 0) != 1) {
    FailAll("cannot send \"" + std::string(sql) + "\": " + ErrorText(nullptr, conn_));
  }
  return ticket;
}

uint64_t Connection::Sync() {
  const uint64_t ticket = Push(true);
  // PQpipelineSync flushes too; in non-blocking mode what does not fit waits for Flush.
  if (broken() || PQpipelineSync(conn_) != 1) FailAll("cannot send a sync: " + ErrorText(nullptr, conn_));
  flushed_through_ = ticket;
  Flush();
  return ticket;
}

void Connection::FlushRequest() {
  if (!broken() && PQsendFlushRequest(conn_) != 1) FailAll("cannot send a flush request: " + ErrorText(nullptr, conn_));
  flushed_through_ = next_ticket_ - 1;
  Flush();
}

void Connection::Flush() {
  if (broken()) return;
  const int f = PQflush(conn_);
  want_write_ = f == 1;
  if (f < 0) FailAll("cannot send to the server: " + ErrorText(nullptr, conn_));
}

void Connection::Finish(Outcome outcome) {
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  if (p.keep) done_[p.ticket] = std::move(outcome);
}

void Connection::FailAll(const std::string& said) {
  // libpq often has nothing to say once the server has gone (its reason came as a statement's
  // error, 57P01 and the like, or as the socket's end): the first reason heard is the one told.
  const bool none = said.empty() || said == "the server gave no reason";
  if (broken() && broken_why_.empty() && !none) broken_why_ = said;
  const std::string why = none ? (broken_why_.empty() ? "the server closed the connection" : broken_why_) : said;
  while (!pending_.empty()) {
    Outcome o;
    o.failure = Failure::kConnection;
    o.error = "the connection to the server failed: " + why;
    Finish(std::move(o));
  }
  segment_error_.clear();
  segment_state_.clear();
}

bool Connection::ReadAvailable() {
  if (pending_.empty()) return true;
  if (broken() || PQconsumeInput(conn_) == 0) {
    FailAll(ErrorText(nullptr, conn_));
    return false;
  }
  while (!pending_.empty() && !PQisBusy(conn_)) {
    PGresult* r = PQgetResult(conn_);
    Pending& p = pending_.front();
    if (r == nullptr) {
      if (p.sync) break;  // its result is still to come
      Finish(std::move(p.outcome));
      continue;
    }
    const ExecStatusType status = PQresultStatus(r);
    if (status == PGRES_PIPELINE_SYNC) {
      PQclear(r);
      segment_error_.clear();
      segment_state_.clear();
      if (p.sync) Finish(Outcome{});
      continue;
    }
    if (p.has_result) {  // a command's further results (none of ours has any)
      PQclear(r);
      continue;
    }
    p.has_result = true;
    Outcome& o = p.outcome;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
      o.command = PQcmdStatus(r);
      o.rows = Rows(r);
      continue;
    }
    if (status == PGRES_PIPELINE_ABORTED) {
      o.failure = Failure::kAborted;
      o.error = segment_error_.empty() ? "an earlier statement of the batch failed" : segment_error_;
      o.sqlstate = segment_state_;
      PQclear(r);
      continue;
    }
    o.failure = Failure::kStatement;
    o.error = ErrorText(r, conn_);
    const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    o.sqlstate = state ? state : "";
    last_failure_state_ = o.sqlstate;
    // The server is ending the session (an administrator, a shutdown) or it is gone: whatever
    // libpq says yet, this connection is done.
    if (o.sqlstate.rfind("57P", 0) == 0 || o.sqlstate.rfind("08", 0) == 0) {
      lost_ = true;
      if (broken_why_.empty()) broken_why_ = o.error;
    }
    if (segment_error_.empty()) {
      segment_error_ = o.error;
      segment_state_ = o.sqlstate;
    }
    PQclear(r);
  }
  if (broken()) {
    FailAll(ErrorText(nullptr, conn_));
    return false;
  }
  return true;
}

void Connection::Pump() {
  Flush();
  ReadAvailable();
}

bool Connection::Done(uint64_t ticket) const {
  return pending_.empty() || pending_.front().ticket > ticket;
}

Outcome Connection::Take(uint64_t ticket) {
  auto it = done_.find(ticket);
  if (it == done_.end()) {
    Outcome o;
    o.failure = Failure::kConnection;
    o.error = "no outcome kept for statement " + std::to_string(ticket) + " (a bug)";
    return o;
  }
  Outcome o = std::move(it->second);
  done_.erase(it);
  return o;
}

void Connection::Forget(uint64_t ticket) {
  for (Pending& p : pending_) {
    if (p.ticket == ticket) p.keep = false;
  }
  done_.erase(ticket);
}

Outcome Connection::Wait(uint64_t ticket) {
  // The server sends a statement's result at a sync point or when asked to.
  if (!Done(ticket) && ticket > flushed_through_) FlushRequest();
  while (!Done(ticket)) {
    Flush();
    if (!ReadAvailable() || Done(ticket)) break;
    pollfd p{fd(), static_cast<short>(POLLIN | (want_write_ ? POLLOUT : 0)), 0};
    if (p.fd < 0) {
      FailAll("no socket");
      break;
    }
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) {
      FailAll("poll failed");
      break;
    }
  }
  return Take(ticket);
}

void Connection::Drain() {
  if (pending_.empty()) return;
  const uint64_t last = pending_.back().ticket;
  // The last statement is answered only once the server flushes its output: ask it to.
  if (last > flushed_through_) FlushRequest();
  Forget(last);
  while (!Done(last)) {
    Flush();
    if (!ReadAvailable() || Done(last)) break;
    pollfd p{fd(), static_cast<short>(POLLIN | (want_write_ ? POLLOUT : 0)), 0};
    if (p.fd < 0 || (::poll(&p, 1, -1) < 0 && errno != EINTR)) {
      FailAll("cannot wait for the server");
      break;
    }
  }
}

bool Connection::InFailedTransaction() const {
  return conn_ && PQtransactionStatus(conn_) == PQTRANS_INERROR;
}

Result<void> Connection::AddToSession(const std::string& sql) {
  if (!pending_.empty()) return MakeError(ErrorCode::kInternal, "\"" + sql + "\" needs a connection with nothing pending");
  const uint64_t ticket = SendSql(sql.c_str());
  Sync();
  Outcome o = Wait(ticket);
  if (o.failure != Failure::kNone) return MakeError(ErrorCode::kDatabase, "\"" + sql + "\" failed: " + o.error);
  session_.push_back(sql);
  return Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> Connection::TakeNotifications() {
  if (broken() || PQconsumeInput(conn_) != 1) {
    const std::string why = conn_ ? ErrorText(nullptr, conn_) : "no connection";
    if (conn_) lost_ = true;  // made again at the store's next use
    return MakeError(ErrorCode::kDatabase, "the connection that hears other hosts broke: " + why);
  }
  std::vector<std::pair<std::string, std::string>> heard;
  while (PGnotify* n = PQnotifies(conn_)) {
    heard.emplace_back(n->relname, n->extra);
    PQfreemem(n);
  }
  return heard;
}

}  // namespace basal::pg
