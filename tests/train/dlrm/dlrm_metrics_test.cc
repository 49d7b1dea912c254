#include "train/dlrm/dlrm_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace sluice {
namespace {

TEST(AreaUnderRocTest, RankSumWithTiesAtTheirMeanRank) {
  const float scores[] = {0.1f, 0.4f, 0.35f, 0.8f};
  const float labels[] = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(AreaUnderRoc(scores, labels, 4), 0.75);
  const float tied[] = {0.5f, 0.5f, 0.5f, 0.5f};
  EXPECT_DOUBLE_EQ(AreaUnderRoc(tied, labels, 4), 0.5);
}

TEST(AreaUnderRocTest, IsNanWithOneClassOrANonFiniteScoreAndNeverHangs) {
  const float labels[] = {0, 1, 0, 1};
  const float one_class[] = {1, 1, 1, 1};
  const float scores[] = {0.2f, 0.6f, 0.1f, 0.9f};
  EXPECT_TRUE(std::isnan(AreaUnderRoc(scores, one_class, 4)));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float with_nan[] = {0.2f, nan, 0.1f, nan};
  EXPECT_TRUE(std::isnan(AreaUnderRoc(with_nan, labels, 4)));  // (looped forever before)
  const float all_nan[] = {nan, nan, nan, nan};
  EXPECT_TRUE(std::isnan(AreaUnderRoc(all_nan, labels, 4)));
  const float inf[] = {0.2f, std::numeric_limits<float>::infinity(), 0.1f, 0.3f};
  EXPECT_TRUE(std::isnan(AreaUnderRoc(inf, labels, 4)));
}

TEST(ClickMetricsTest, LogLossAndAccuracy) {
  DlrmMetrics m = ClickMetrics({0.9f, 0.2f, 0.6f, 0.4f}, {1, 0, 0, 1});
  EXPECT_EQ(m.samples, 4u);
  EXPECT_DOUBLE_EQ(m.accuracy, 0.5);
  EXPECT_NEAR(m.logloss, -(std::log(0.9) + std::log(0.8) + std::log(0.4) + std::log(0.4)) / 4, 1e-6);
  EXPECT_DOUBLE_EQ(m.auc, 0.75);
  DlrmMetrics nan = ClickMetrics({std::numeric_limits<float>::quiet_NaN(), 0.5f}, {1, 0});
  EXPECT_TRUE(std::isnan(nan.auc));
  EXPECT_NE(nan.ToJson().find("\"auc\": null"), std::string::npos) << nan.ToJson();
}

}  // namespace
}  // namespace sluice
