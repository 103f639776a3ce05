// The SQLite journal's checkpoint plan (store/sqlite/checkpointer.h): after each commit, whether
// the WAL is left alone, copied by the background thread, or its short tail copied by the commit
// itself. The regression it guards: a count of copied frames from the WAL's earlier life made a
// full new WAL look like a short tail, so the loop's own commit copied all of it (and fsynced).
#include <gtest/gtest.h>

#include "parent/store/sqlite/checkpointer.h"
#include "parent/store/sqlite/sqlite_store.h"

namespace basal::sqlite {
namespace {

using Step = CheckpointPlan::Step;

TEST(CheckpointPlanTest, ASmallWalIsLeftAlone) {
  CheckpointPlan p;
  EXPECT_EQ(p.OnCommit(1, false, false), Step::kNone);
  EXPECT_EQ(p.OnCommit(kCheckpointPages - 1, false, false), Step::kNone);
}

TEST(CheckpointPlanTest, PastTheThresholdTheThreadCopiesAndOnlyTheShortTailIsCopiedInline) {
  CheckpointPlan p;
  EXPECT_EQ(p.OnCommit(kCheckpointPages, false, false), Step::kBackground);
  const uint32_t life = p.life();
  EXPECT_EQ(p.OnCommit(kCheckpointPages + 2, /*running=*/true, false), Step::kNone);
  p.PassEnded(life, kCheckpointPages);
  // What the pass left behind is short: this commit copies it, and the WAL can start over.
  EXPECT_EQ(p.OnCommit(kCheckpointPages + 4, false, false), Step::kInline);
  // A long tail (commits raced a slow pass) goes to the thread again.
  CheckpointPlan q;
  ASSERT_EQ(q.OnCommit(kCheckpointPages, false, false), Step::kBackground);
  q.PassEnded(q.life(), kCheckpointPages);
  EXPECT_EQ(q.OnCommit(kCheckpointPages + kInlineCheckpointMaxTailPages + 1, false, false), Step::kBackground);
}

TEST(CheckpointPlanTest, AfterTheWalStartsOverItsEarlierCountDoesNotMakeAFullWalLookLikeATail) {
  CheckpointPlan p;
  ASSERT_EQ(p.OnCommit(kCheckpointPages, false, false), Step::kBackground);
  p.PassEnded(p.life(), kCheckpointPages + 3);  // the pass copied what was there when it began
  ASSERT_EQ(p.OnCommit(kCheckpointPages + 5, false, false), Step::kInline);
  // The next batch starts the WAL over, and it fills again to just past the earlier count.
  for (int pages = 2; pages < kCheckpointPages; pages += 2) ASSERT_EQ(p.OnCommit(pages, false, false), Step::kNone);
  EXPECT_EQ(p.OnCommit(kCheckpointPages + 4, false, false), Step::kBackground)
      << "a whole new WAL must go to the thread, not be copied by the loop's commit";
}

TEST(CheckpointPlanTest, APassOfAnEarlierLifeEndingLateIsNotTakenForThisOne) {
  CheckpointPlan p;
  ASSERT_EQ(p.OnCommit(kCheckpointPages, false, false), Step::kBackground);
  const uint32_t old_life = p.life();
  ASSERT_EQ(p.OnCommit(10, true, false), Step::kNone);  // started over while the pass ran
  ASSERT_EQ(p.OnCommit(kCheckpointPages - 2, true, false), Step::kNone);
  p.PassEnded(old_life, kCheckpointPages);
  EXPECT_EQ(p.OnCommit(kCheckpointPages + 2, false, false), Step::kBackground);
}

TEST(CheckpointPlanTest, AFailedPassOrThreadAndTheHardLimitCopyInline) {
  CheckpointPlan p;
  ASSERT_EQ(p.OnCommit(kCheckpointPages, false, false), Step::kBackground);
  p.PassEnded(p.life(), -1);  // that pass failed: nothing is known of what is copied
  EXPECT_EQ(p.OnCommit(kCheckpointPages + 2, false, false), Step::kBackground);
  CheckpointPlan no_thread;
  EXPECT_EQ(no_thread.OnCommit(kCheckpointPages, false, /*failed=*/true), Step::kInline);
  CheckpointPlan behind;
  ASSERT_EQ(behind.OnCommit(kCheckpointPages, false, false), Step::kBackground);
  EXPECT_EQ(behind.OnCommit(kWalHardLimitPages, /*running=*/true, false), Step::kInline)
      << "the WAL stays bounded even while the thread falls behind";
}

}  // namespace
}  // namespace basal::sqlite
