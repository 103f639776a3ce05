// See checkpointer.h and docs/journal.md ("Durability").
#include "parent/store/sqlite/checkpointer.h"

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

CheckpointPlan::Step CheckpointPlan::OnCommit(int wal_pages, bool running, bool failed) {
  // A WAL that shrank started over from its beginning (the batch after a complete checkpoint).
  if (wal_pages < last_wal_pages_) ++life_;
  last_wal_pages_ = wal_pages;
  if (wal_pages < kCheckpointPages) return Step::kNone;
  if (failed || wal_pages >= kWalHardLimitPages) return Step::kInline;
  if (running) return Step::kNone;  // look again after the next commit
  const int64_t b = backfilled_.load();
  const bool this_life = b >= 0 && static_cast<uint32_t>(b >> 32) == life_;
  const int copied = this_life ? static_cast<int>(b & 0xffffffff) : -1;
  const int tail = copied >= 0 && copied <= wal_pages ? wal_pages - copied : wal_pages;
  return tail <= kInlineCheckpointMaxTailPages ? Step::kInline : Step::kBackground;
}

void CheckpointPlan::PassEnded(uint32_t life, int copied) {
  backfilled_ = copied < 0 ? int64_t{-1} : static_cast<int64_t>((static_cast<uint64_t>(life) << 32) | static_cast<uint32_t>(copied));
}

void Checkpointer::Request(uint32_t life) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = true;
    wanted_ = true;
    wanted_life_ = life;
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
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
    const uint32_t life = wanted_life_;
    lock.unlock();
    int log = 0, copied = -1;
    if (!opened || sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied) != SQLITE_OK)
      copied = -1;
    plan_.PassEnded(life, copied);
    running_ = false;
    lock.lock();
  }
  lock.unlock();
  sqlite3_close_v2(db);
}

int Checkpointer::OnWalCommit(void* arg, sqlite3* db, const char* schema, int wal_pages) {
  auto* c = static_cast<Checkpointer*>(arg);
  if (c == nullptr) {
    if (wal_pages >= kCheckpointPages)
      (void)sqlite3_wal_checkpoint_v2(db, schema, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    return SQLITE_OK;
  }
  switch (c->plan_.OnCommit(wal_pages, c->running_.load(), c->failed_.load())) {
    case CheckpointPlan::Step::kNone: break;
    case CheckpointPlan::Step::kBackground: c->Request(c->plan_.life()); break;
    case CheckpointPlan::Step::kInline:
      (void)sqlite3_wal_checkpoint_v2(db, schema, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
      break;
  }
  return SQLITE_OK;
}

}  // namespace basal::sqlite
