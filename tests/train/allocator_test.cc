#include "train/allocator.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

// Built twice: on glibc's malloc (allocator_test) and linked with jemalloc (allocator_jemalloc_test,
// when the build finds it); SLUICE_EXPECTED_MALLOC names the one the binary runs on.

namespace sluice {
namespace {

uint64_t RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

#ifdef SLUICE_SANITIZED
#define SKIP_UNDER_SANITIZERS() GTEST_SKIP() << "a sanitizer's malloc"
#else
#define SKIP_UNDER_SANITIZERS() (void)0
#endif

TEST(AllocatorTest, NamesTheMallocTheProcessRunsOn) {
  if (std::getenv("LD_PRELOAD") != nullptr) GTEST_SKIP() << "LD_PRELOAD may bring another malloc";
  EXPECT_STREQ(AllocatorName(), SLUICE_EXPECTED_MALLOC);
}

// A step's tensors freed stay with the process (no faulting and zeroing them again next step)
// until ReleaseFreeHeap hands them back.
TEST(AllocatorTest, FreedBlocksStayUntilReleased) {
  SKIP_UNDER_SANITIZERS();
  if (std::getenv("MALLOC_CONF") != nullptr || std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr) {
    GTEST_SKIP() << "the environment tunes the allocator";
  }
  TuneAllocator();
  ReleaseFreeHeap();
  constexpr size_t kBlock = 4 << 20, kBlocks = 64;  // 256 MiB in tensors of 4 MiB
  const uint64_t before = RssBytes();
  std::vector<void*> blocks;
  for (size_t i = 0; i < kBlocks; ++i) {
    blocks.push_back(std::malloc(kBlock));
    ASSERT_NE(blocks.back(), nullptr);
    std::memset(blocks.back(), static_cast<int>(i + 1), kBlock);
  }
  const uint64_t touched = RssBytes();
  ASSERT_GT(touched, before + 200 * (uint64_t{1} << 20)) << before << " -> " << touched;
  for (void* b : blocks) std::free(b);
  const uint64_t freed = RssBytes();
  EXPECT_GT(freed, before + 200 * (uint64_t{1} << 20)) << "freed blocks went back at once: " << before << " -> " << freed;
  ReleaseFreeHeap();
  const uint64_t released = RssBytes();
  EXPECT_LT(released, before + 48 * (uint64_t{1} << 20)) << "kept after ReleaseFreeHeap: " << before << " -> " << released;
}

TEST(AllocatorTest, JemallocKeepsFreePagesInEveryArena) {
  using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);
  const auto mallctl = reinterpret_cast<MallctlFn>(::dlsym(RTLD_DEFAULT, "mallctl"));
  if (mallctl == nullptr) GTEST_SKIP() << "not on jemalloc";
  if (std::getenv("MALLOC_CONF") != nullptr) GTEST_SKIP() << "MALLOC_CONF tunes jemalloc";
  TuneAllocator();
  for (const char* key : {"arenas.dirty_decay_ms", "arenas.muzzy_decay_ms", "arena.0.dirty_decay_ms",
                          "arena.0.muzzy_decay_ms"}) {
    ssize_t ms = 0;
    size_t size = sizeof ms;
    ASSERT_EQ(mallctl(key, &ms, &size, nullptr, 0), 0) << key;
    EXPECT_EQ(ms, -1) << key;
  }
}

}  // namespace
}  // namespace sluice
