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
#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace basal::sqlite {

class Checkpointer {
 public:
  explicit Checkpointer(std::string path) : path_(std::move(path)) {}
  ~Checkpointer();  // joins the thread and closes its connection
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // SQLite's WAL hook (`arg` is a Checkpointer*, or null when SQLite has no threads): runs on the
  // owner's thread after every commit, with the WAL's size in pages. Background passes copy the
  // bulk while commits go on; once a pass leaves only a short tail, one inline checkpoint copies
  // the tail, everything is then copied and the next batch starts the WAL over. Every WAL (every
  // generation, from one start-over to the next) gets its background pass: what an earlier
  // generation's pass copied says nothing of this one's.
  static int OnWalCommit(void* arg, sqlite3* db, const char* schema, int wal_pages);

  // What the hook and the thread have done (for tests and profiles): background passes asked for
  // and run, inline checkpoints made on the owner's thread, and the WAL's start-overs seen.
  struct Counts {
    uint64_t requests = 0, passes = 0, inline_checkpoints = 0, restarts = 0;
  };
  Counts counts() const;

 private:
  void Request();  // starts one pass (and the thread, the first time); only when !running()
  void Run();
  void NoteRestart();      // the owner saw the WAL start over: a new generation, nothing copied of it
  int Backfilled() const;  // frames this generation's last pass copied; -1 when none has ended in it

  const std::string path_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false, stop_ = false;
  std::atomic<bool> running_{false}, failed_{false};
  // Under mu_: the WAL's generation (counted by the owner at each start-over), the one the
  // requested or running pass belongs to, and the frames that pass copied (-1: none yet).
  uint64_t generation_ = 0, pass_generation_ = 0;
  int backfilled_ = -1;
  int last_wal_pages_ = 0;  // the owner's thread only
  std::atomic<uint64_t> requests_{0}, passes_{0}, inline_checkpoints_{0}, restarts_{0};
  std::thread thread_;
};

}  // namespace basal::sqlite
