// See checkpointer.h and docs/journal.md ("Durability").
#include "parent/store/sqlite/checkpointer.h"

#include "parent/signal_free_thread.h"
#include "parent/store/sqlite/sqlite_store.h"

namespace basal::sqlite {

Checkpointer::~Checkpointer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Checkpointer::Request() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = true;
    wanted_ = true;
    // It takes no signal (signal_free_thread.h): started by a serve daemon's recovery, before the
    // daemon blocked SIGTERM for its signalfd, it once took the SIGTERM meant for the drain and the
    // daemon died of it.
    if (!thread_.joinable()) thread_ = SignalFreeThread([this] { Run(); });
  }
  cv_.notify_one();
}

void Checkpointer::Run() {
  sqlite3* db = nullptr;
  bool opened =
      sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) == SQLITE_OK;
  // A fresh connection knows the file is in WAL mode only once it has read it: until then a
  // checkpoint is a no-op that reports -1.
  if (opened) opened = sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) == SQLITE_OK;
  if (!opened) failed_ = true;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return wanted_ || stop_; });
    if (stop_) break;
    wanted_ = false;
    lock.unlock();
    int log = 0, copied = -1;
    if (!opened || sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied) != SQLITE_OK)
      copied = -1;
    backfilled_ = copied;
    running_ = false;
    lock.lock();
  }
  lock.unlock();
  sqlite3_close_v2(db);
}

int Checkpointer::OnWalCommit(void* arg, sqlite3* db, const char* schema, int wal_pages) {
  auto* c = static_cast<Checkpointer*>(arg);
  if (wal_pages < kCheckpointPages) return SQLITE_OK;
  bool inline_checkpoint = c == nullptr || c->failed_.load() || wal_pages >= kWalHardLimitPages;
  if (!inline_checkpoint) {
    if (c->running_.load()) return SQLITE_OK;  // look again after the next commit
    // A backfilled count above the WAL's size is from before the WAL started over.
    const int backfilled = c->backfilled_.load();
    const int tail = backfilled >= 0 && backfilled <= wal_pages ? wal_pages - backfilled : wal_pages;
    inline_checkpoint = tail <= kInlineCheckpointMaxTailPages;
    if (!inline_checkpoint) c->Request();
  }
  if (inline_checkpoint) (void)sqlite3_wal_checkpoint_v2(db, schema, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  return SQLITE_OK;
}

}  // namespace basal::sqlite
