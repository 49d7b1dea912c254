#include "train/fingerprint.h"

#include <gtest/gtest.h>

#include "train/dlrm/dlrm_config.h"
#include "train/lp/lp_config.h"

namespace sluice {
namespace {

TEST(FingerprintTest, CoversTaskModelAndTrainButTheEpochCount) {
  EXPECT_TRUE(InConfigFingerprint("task"));
  EXPECT_TRUE(InConfigFingerprint("model.dim"));
  EXPECT_TRUE(InConfigFingerprint("train.lr"));
  EXPECT_TRUE(InConfigFingerprint("train.seed"));
  for (const char* out : {"train.epochs", "dataset", "run_dir", "progress", "checkpoint_every",
                          "eval.every", "eval.patience", "storage.budget", "storage.mode",
                          "io.queue_depth", "threads.total"}) {
    EXPECT_FALSE(InConfigFingerprint(out)) << out;
  }
}

template <typename Config>
std::string FingerprintWith(const std::vector<std::string>& overrides) {
  Config c;
  EXPECT_TRUE(LoadConfig("", overrides, c).ok());
  return ConfigFingerprint(c);
}

TEST(FingerprintTest, ChangesWithWhatShapesTheTrajectoryOnly) {
  const std::string base = FingerprintWith<LpConfig>({});
  for (const char* same : {"train.epochs=99", "storage.budget=8GiB", "threads.total=1",
                           "eval.every=3", "run_dir=/elsewhere", "dataset=/moved", "io.queue_depth=8",
                           "storage.mode=in_memory", "checkpoint_every=5", "progress=false"}) {
    EXPECT_EQ(FingerprintWith<LpConfig>({same}), base) << same;
  }
  for (const char* other : {"train.lr=0.2", "model.dim=8", "train.seed=2", "model.reciprocal=true",
                            "train.ordering=beta"}) {
    EXPECT_NE(FingerprintWith<LpConfig>({other}), base) << other;
  }
  const std::string dlrm = FingerprintWith<DlrmConfig>({});
  EXPECT_NE(FingerprintWith<DlrmConfig>({"train.lr=0.2"}), dlrm);
  EXPECT_NE(FingerprintWith<DlrmConfig>({"model.table_rows=10"}), dlrm);
  EXPECT_EQ(FingerprintWith<DlrmConfig>({"storage.backend=rocksdb"}), dlrm);
  EXPECT_EQ(FingerprintWith<DlrmConfig>({"train.epochs=7"}), dlrm);
}

TEST(FingerprintTest, KeysAddedLaterLeaveItAsItWasAtTheirNeutralValues) {
  LpConfig c;
  FingerprintVisitor v;
  c.VisitFields(v);
  for (const char* later : {"train.lr_decay", "train.lr_decay_patience", "train.lr_decay_restore", "model.encoder",
                            "model.fanout"}) {
    EXPECT_EQ(v.text().find(later), std::string::npos) << later;
  }
  const std::string base = FingerprintWith<LpConfig>({});
  for (const char* other : {"train.lr_decay=0.5", "train.lr_decay_patience=2", "train.lr_decay_restore=true",
                            "model.encoder=graphsage", "model.fanout=5"}) {
    EXPECT_NE(FingerprintWith<LpConfig>({other}), base) << other;
  }
  EXPECT_NE(FingerprintWith<LpConfig>({"model.encoder=graphsage"}),
            FingerprintWith<LpConfig>({"model.encoder=graphsage", "model.fanout=5"}));
  EXPECT_NE(FingerprintWith<DlrmConfig>({"train.lr_decay=0.5"}), FingerprintWith<DlrmConfig>({}));
  EXPECT_EQ(FingerprintLines("train:\n  lr: 0.1\n  lr_decay: 1\nmodel:\n  encoder: none\n"), "train.lr: 0.1\n");
}

}  // namespace
}  // namespace sluice
