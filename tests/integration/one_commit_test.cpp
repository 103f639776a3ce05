// A start and an end in one commit: when the worker has written its `done` by the time the batch
// that starts its activation is about to commit, the module reads it first and the end joins that
// batch (module.cpp, ReadBegunWorker). Counted in the journal's WAL: a commit is a frame whose
// header carries the database's size. That the worker has answered by then is made certain here,
// not likely: the test and its workers share one CPU, and the workers run under SCHED_FIFO, so the
// `activate` write hands the worker the CPU until it waits for its next frame. Nothing here is
// timed. Needs CAP_SYS_NICE (skipped without it).
#include <gtest/gtest.h>
#include <sched.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "integration/test_support.h"
#include "parent/module_host.h"

namespace basal::testing {
namespace {

uint32_t BigEndian32(const std::string& bytes, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 3]));
}

// The commits in a WAL file since it last started over: the frames of its current salts whose
// header says the database's size after the commit (0 in the other frames of a transaction).
int WalCommits(const std::string& wal_path) {
  std::ifstream in(wal_path, std::ios::binary);
  const std::string wal((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (wal.size() < 32) return 0;
  const uint32_t page_size = BigEndian32(wal, 8);
  const std::string salts = wal.substr(16, 8);
  int commits = 0;
  for (size_t at = 32; at + 24 + page_size <= wal.size(); at += 24 + page_size) {
    if (wal.compare(at + 8, 8, salts) != 0) break;  // a frame of an earlier generation
    if (BigEndian32(wal, at + 4) != 0) ++commits;
  }
  return commits;
}

class OneCommitTest : public ModuleFixture {
 protected:
  void SetUp() override {
    ModuleFixture::SetUp();
    ASSERT_EQ(sched_getaffinity(0, sizeof saved_cpus_, &saved_cpus_), 0) << std::strerror(errno);
    ASSERT_EQ(sched_getparam(0, &saved_param_), 0) << std::strerror(errno);
    saved_policy_ = sched_getscheduler(0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0) << std::strerror(errno);
    pinned_ = true;
    // The module's threads (its launch thread, which spawns the workers) are made while this
    // thread runs under SCHED_FIFO, so the workers inherit it; this thread, the module's loop, goes
    // back to its own policy once the module is open (OpenWithRealtimeWorkers).
    sched_param fifo{};
    fifo.sched_priority = 1;
    if (sched_setscheduler(0, SCHED_FIFO, &fifo) != 0) {
      GTEST_SKIP() << "SCHED_FIFO is refused here (" << std::strerror(errno)
                   << "): the test needs CAP_SYS_NICE to make the worker answer before the start commits";
    }
    realtime_ = true;
  }
  void TearDown() override {
    module_.reset();  // its workers first
    if (realtime_) (void)sched_setscheduler(0, saved_policy_, &saved_param_);
    if (pinned_) (void)sched_setaffinity(0, sizeof saved_cpus_, &saved_cpus_);
    ModuleFixture::TearDown();
  }
  Module& OpenWithRealtimeWorkers() {
    Module& m = Open();
    EXPECT_EQ(sched_setscheduler(0, saved_policy_, &saved_param_), 0) << std::strerror(errno);
    realtime_ = false;
    return m;
  }
  int Commits() { return WalCommits(dir_ + "/journal.db-wal"); }

  cpu_set_t saved_cpus_{};
  sched_param saved_param_{};
  int saved_policy_ = SCHED_OTHER;
  bool pinned_ = false, realtime_ = false;
};

TEST_F(OneCommitTest, AnActivationWhoseDoneIsWrittenBeforeItsStartCommitsCommitsOnce) {
  OpenWithRealtimeWorkers();
  FlowRef f = Add("export default (x) => x + 1;");
  ActivationResult first = module_->Run(f, 1);  // starts the worker: its activate goes in a later pass
  ASSERT_TRUE(first.ok()) << first.message;
  for (int i = 0; i < 3; ++i) {
    const int before = Commits();
    ActivationResult r = module_->Run(f, 10 + i);
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_EQ(r.result, 11 + i);
    EXPECT_EQ(Commits() - before, 1) << "the start and the end of activation " << r.activation_id;
    // Both are in the journal: the activation ended ok with its result.
    auto rows = Reader()->Activations(r.activation_id, 1);
    ASSERT_TRUE(rows && rows->size() == 1) << "activation " << r.activation_id;
    EXPECT_EQ(rows->front().outcome, "ok");
    EXPECT_EQ(rows->front().result_json, std::to_string(11 + i));
  }
}

TEST_F(OneCommitTest, ARunAcceptedStartedAndEndedInOnePassCommitsOnceAndItsStopComesAfterTheCommit) {
  OpenWithRealtimeWorkers();
  FlowRef f = Add("export default (x) => x * 2;");
  ActivationResult warm = module_->Run(f, 1);  // a worker of the flow, idle
  ASSERT_TRUE(warm.ok()) << warm.message;
  const int before = Commits();
  std::optional<RunStop> stop;
  int commits_when_stopped = -1;
  auto accepted = module_->host().StartRun(f, 21, RunOptions{}, [&](const RunStop& s) {
    stop = s;
    commits_when_stopped = Commits();
  });
  ASSERT_TRUE(accepted) << accepted.error().message;
  // Whoever hears of the commit (serve's answer to the request that started the run) finds the run
  // live, its stop still to come: it waits for the stop, which carries the end, and reads nothing back.
  std::optional<bool> live_at_commit, stopped_at_commit;
  module_->host().AfterCommit([&](const Result<void>& committed) {
    EXPECT_TRUE(committed);
    live_at_commit = module_->host().RunLive(accepted->run.id);
    stopped_at_commit = stop.has_value();
  });
  module_->RunUntilIdle();
  ASSERT_TRUE(live_at_commit.has_value());
  EXPECT_TRUE(*live_at_commit);
  EXPECT_FALSE(*stopped_at_commit);
  EXPECT_FALSE(module_->host().RunLive(accepted->run.id));  // told now
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->state, RunState::kEnded);
  EXPECT_EQ(stop->outcome, "ok");
  EXPECT_EQ(stop->result.result, 42);
  // Its stop was told after the one commit that holds the run's row, its start and its end.
  EXPECT_EQ(commits_when_stopped - before, 1);
  EXPECT_EQ(Commits() - before, 1);
  auto row = module_->host().runs().GetRun(accepted->run.id);
  ASSERT_TRUE(row && *row);
  EXPECT_EQ((*row)->state, RunState::kEnded);
  EXPECT_EQ((*row)->outcome, "ok");
}

}  // namespace
}  // namespace basal::testing
