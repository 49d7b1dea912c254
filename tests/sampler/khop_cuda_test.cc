// The CUDA k-hop sampler against the CPU one: the same invariants and the same output bit for
// bit (so the same distribution), on graphs big enough to split every kernel over many blocks.
// Skips, saying why, where no CUDA device can be used.

#include "sampler/cuda/khop_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "sampler/cuda/keyed_mask_cuda.h"

#include "sampler/khop_sampler.h"
#include "tests/sampler/khop_test_util.h"

namespace sluice {
namespace {

using khop_test::ExpectInvariants;
using khop_test::PowerLawGraph;
using khop_test::Same;
using khop_test::Seeds;

TEST(CudaKHopSamplerTest, MatchesTheCpuSamplerExactly) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << "not run: " << why;
  CsrGraph g = PowerLawGraph(50000, 600000, 21);
  for (bool replace : {true, false}) {
    for (std::vector<int> fanouts : {std::vector<int>{15, 10, 5}, std::vector<int>{-1, 4}}) {
      KHopOptions o;
      o.fanouts = fanouts;
      o.replace = replace;
      KHopSampler cpu(g, o);
      auto gpu = CudaKHopSampler::Create(g, o);
      ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
      for (uint64_t step = 0; step < 4; ++step) {  // reuse: stale stamps must not leak
        auto seeds = Seeds(50000, 1024, 300 + step);
        seeds.push_back(seeds.front());  // a repeated seed
        auto got = (*gpu)->Sample(seeds, {3, 2, step});
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        ExpectInvariants(g, *got, o);
        EXPECT_TRUE(Same(*got, cpu.Sample(seeds, {3, 2, step})))
            << "replace " << replace << " step " << step << " fanouts " << fanouts.size();
      }
    }
  }
}

TEST(CudaKHopSamplerTest, RejectsOutOfRangeSeeds) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << "not run: " << why;
  CsrGraph g = PowerLawGraph(100, 500, 1);
  auto gpu = CudaKHopSampler::Create(g, KHopOptions{});
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  std::vector<int64_t> seeds = {3, 100};
  auto got = (*gpu)->Sample(seeds, {1, 0, 0});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("seed 100 out of range"), std::string::npos);
}

// The keyed dropout mask drawn on the device: the host's draws, element for element, over a
// size that needs many blocks and the grid-stride loop.
TEST(KeyedMaskCudaTest, DrawsWhatTheHostDraws) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << "not run: " << why;
  const uint64_t n = (uint64_t{65535} * 8 * 256) + 12345;
  const Key key = Key(9).With(4).With(2);
  const double p = 0.3;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, n * sizeof(float)), cudaSuccess);
  const Status s = KeyedMaskCuda(dev, n, key, p, scale, nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<float> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dev);
  uint64_t wrong = 0, kept = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const float want = key.Unit(i) >= p ? scale : 0.0f;
    wrong += got[i] != want;
    kept += want != 0;
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1 - p, 0.01);
}

}  // namespace
}  // namespace sluice
