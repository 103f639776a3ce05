// Copies the WAL back into the database (PASSIVE checkpoints) on its own thread and its own
// connection. SQLite's automatic checkpoint runs inside the commit that crosses the threshold and
// fsyncs even under synchronous=NORMAL: 29-207 ms commits. A passive checkpoint takes no write
// lock, so the owner keeps committing while it runs; durability is unchanged (a commit is in the
// WAL before it returns, whoever copies it later). Started on first use: readers never get one.
//
//   sqlite3_wal_hook(db, &OnWalCommit, checkpointer);   // replaces SQLite's automatic checkpoint
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace basal::sqlite {

// The WAL hook's choice after each commit, apart from SQLite and the thread (tested alone). What a
// background pass copied describes one life of the WAL only: once the WAL starts over, a count from
// its earlier life would make a full new WAL look like a short tail, and the commit would copy all of
// it itself (fsyncs on the loop's thread: 7-18 ms commits, one cluster of slow activations about
// every 250 warm ones, before this was kept apart).
class CheckpointPlan {
 public:
  enum class Step { kNone, kBackground, kInline };
  // After a commit that left the WAL at `wal_pages` pages (owner's thread). `running`: a background
  // pass is under way; `failed`: the thread cannot checkpoint (or SQLite has no threads).
  Step OnCommit(int wal_pages, bool running, bool failed);
  // The WAL's life a pass requested now copies from (owner's thread).
  uint32_t life() const { return life_; }
  // A background pass requested in `life` ended having copied `copied` frames (-1: it failed). Any thread.
  void PassEnded(uint32_t life, int copied);

 private:
  int last_wal_pages_ = 0;
  uint32_t life_ = 0;
  // (life << 32) | copied of the last pass; -1: no pass has told anything usable.
  std::atomic<int64_t> backfilled_{-1};
};

class Checkpointer {
 public:
  explicit Checkpointer(std::string path) : path_(std::move(path)) {}
  ~Checkpointer();  // joins the thread and closes its connection
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // SQLite's WAL hook (`arg` is a Checkpointer*, or null when SQLite has no threads): runs on the
  // owner's thread after every commit, with the WAL's size in pages. Background passes copy the
  // bulk while commits go on; once a pass leaves only a short tail, one inline checkpoint copies
  // the tail, everything is then copied and the next batch starts the WAL over.
  static int OnWalCommit(void* arg, sqlite3* db, const char* schema, int wal_pages);

 private:
  void Request(uint32_t life);  // starts one pass (and the thread, the first time); only when !running()
  void Run();

  const std::string path_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, stop_ = false;
  uint32_t wanted_life_ = 0;  // under mu_
  std::atomic<bool> running_{false}, failed_{false};
  CheckpointPlan plan_;
  std::thread thread_;
};

}  // namespace basal::sqlite
