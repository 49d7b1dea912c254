// The fused softmax sweep: its exp against the C library's, and its gradients and loss against
// a double-precision evaluation, including lane tails, masked rows and scores far apart.

#include "train/lp/softmax_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace sluice {
namespace {

TEST(SoftmaxRowsTest, ExpWithinTwoUlpOverTheRangeAndZeroBelowIt) {
  float worst = 0;
  for (float x = 0.0f; x > -87.0f; x -= 0.0137f) {
    const float want = std::exp(x), got = ExpNonPositive(x);
    worst = std::max(worst, std::abs(got - want) / (want * 1.1920929e-7f));
  }
  EXPECT_LE(worst, 2.0f);
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-88.0f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-1e30f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-INFINITY), 0.0f);
}

TEST(SoftmaxRowsTest, MatchesDoublePrecisionSoftmax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int64_t n : {1, 15, 16, 17, 64, 500}) {
    const int64_t rows = 7;
    std::vector<float> s(static_cast<size_t>(rows * n)), pos(rows), mask(rows, 1.0f);
    for (float& v : s) v = normal(rng);
    for (float& v : pos) v = normal(rng);
    s[0] = 200.0f;   // a negative far above the rest: the others underflow to 0
    pos[1] = 150.0f; // the true candidate far above: loss ~0, gradients ~0
    mask[4] = 0.0f;
    const std::vector<float> in = s;
    std::vector<float> g_pos(rows);
    std::vector<double> loss(rows);
    const float scale = 0.25f;
    SoftmaxRows(s.data(), pos.data(), mask.data(), 0, rows, n, scale, g_pos.data(), loss.data());
    for (int64_t i = 0; i < rows; ++i) {
      if (i == 4) {
        EXPECT_EQ(loss[4], 0.0);
        EXPECT_EQ(g_pos[4], 0.0f);
        for (int64_t j = 0; j < n; ++j) EXPECT_EQ(s[4 * n + j], 0.0f);
        continue;
      }
      double mx = pos[i];
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, double{in[i * n + j]});
      double z = std::exp(pos[i] - mx);
      for (int64_t j = 0; j < n; ++j) z += std::exp(in[i * n + j] - mx);
      EXPECT_NEAR(loss[i], std::log(z) + mx - pos[i], 1e-5 * (1 + std::abs(mx - pos[i])))
          << "n " << n << " row " << i;
      EXPECT_NEAR(g_pos[i], scale * (std::exp(pos[i] - mx) / z - 1), 1e-6) << "n " << n;
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_NEAR(s[i * n + j], scale * std::exp(in[i * n + j] - mx) / z, 1e-6)
            << "n " << n << " row " << i << " col " << j;
      }
    }
  }
}

TEST(SoftmaxRowsTest, SplittingRowsAcrossCallsGivesIdenticalResults) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const int64_t rows = 50, n = 37;
  std::vector<float> s(rows * n), pos(rows);
  for (float& v : s) v = normal(rng);
  for (float& v : pos) v = normal(rng);
  std::vector<float> a = s, b = s, ga(rows), gb(rows);
  std::vector<double> la(rows), lb(rows);
  SoftmaxRows(a.data(), pos.data(), nullptr, 0, rows, n, 1.0f, ga.data(), la.data());
  for (int64_t lo = 0; lo < rows; lo += 13) {
    SoftmaxRows(b.data(), pos.data(), nullptr, lo, std::min(rows, lo + 13), n, 1.0f, gb.data(),
                lb.data());
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(ga, gb);
  EXPECT_EQ(la, lb);
}

// train.own_negative: the own score is one more negative of its row. Against a double-precision
// softmax over [pos, row, own] with label smoothing spread over the n + 1 negatives; a row whose
// own score is -inf (a self-loop) gives exactly what the row gives without one, and a zero
// own gradient; a masked row zeroes it too.
TEST(SoftmaxRowsTest, OwnScoreIsOneMoreNegativeLeftOutWhereMinusInfinity) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t rows = 6, n = 33;
  const float scale = 0.5f, eps = 0.1f;
  std::vector<float> s(static_cast<size_t>(rows * n)), pos(rows), own(rows), mask(rows, 1.0f);
  for (float& v : s) v = normal(rng);
  for (float& v : pos) v = normal(rng);
  for (float& v : own) v = normal(rng);
  own[1] = 40.0f;  // the own entity far above everything: it takes the row's mass
  own[2] = -INFINITY;
  mask[3] = 0.0f;
  const std::vector<float> in = s;
  std::vector<float> g_pos(rows), g_own(rows, 7.0f);
  std::vector<double> loss(rows);
  SoftmaxRows(s.data(), pos.data(), mask.data(), 0, rows, n, scale, g_pos.data(), loss.data(),
              {nullptr, eps, own.data(), g_own.data()});
  // Row 2 against the same row without an own score.
  std::vector<float> plain(in.begin() + 2 * n, in.begin() + 3 * n), g_plain(1);
  std::vector<double> l_plain(1);
  SoftmaxRows(plain.data(), pos.data() + 2, nullptr, 0, 1, n, scale, g_plain.data(), l_plain.data(),
              {nullptr, eps});
  EXPECT_EQ(std::vector<float>(s.begin() + 2 * n, s.begin() + 3 * n), plain);
  EXPECT_EQ(g_pos[2], g_plain[0]);
  EXPECT_EQ(loss[2], l_plain[0]);
  EXPECT_EQ(g_own[2], 0.0f);
  EXPECT_EQ(g_own[3], 0.0f);
  EXPECT_EQ(loss[3], 0.0);
  for (int64_t i : {0, 1, 4, 5}) {
    double mx = std::max(pos[i], own[i]);
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, double{in[i * n + j]});
    double z = std::exp(pos[i] - mx) + std::exp(own[i] - mx), sum = own[i];
    for (int64_t j = 0; j < n; ++j) z += std::exp(in[i * n + j] - mx), sum += in[i * n + j];
    const double m = n + 1, want = std::log(z) + mx - (1 - eps) * pos[i] - eps * sum / m;
    EXPECT_NEAR(loss[i], want, 1e-5 * (1 + std::abs(want))) << "row " << i;
    EXPECT_NEAR(g_pos[i], scale * (std::exp(pos[i] - mx) / z - 1 + eps), 1e-6) << "row " << i;
    EXPECT_NEAR(g_own[i], scale * (std::exp(own[i] - mx) / z - eps / m), 1e-6) << "row " << i;
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_NEAR(s[i * n + j], scale * (std::exp(in[i * n + j] - mx) / z - eps / m), 1e-6)
          << "row " << i << " col " << j;
    }
  }
  EXPECT_GT(g_own[1], 0.95f * scale);  // nearly all of row 1's mass
}

}  // namespace
}  // namespace sluice
