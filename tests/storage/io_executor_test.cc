#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "common/aligned_buffer.h"
#include "tests/storage/test_util.h"

namespace sluice {
namespace {

using testing::FaultSession;
using testing::Session;
using testing::TempDir;

constexpr uint32_t kBlock = 4096;
constexpr uint32_t kBlocks = 256;

std::byte Pattern(uint64_t offset) { return static_cast<std::byte>((offset * 131 + 7) % 251); }

// A file of kBlocks blocks whose byte at offset o is Pattern(o).
std::string MakePatternFile(const TempDir& dir) {
  std::vector<std::byte> bytes(uint64_t{kBlocks} * kBlock);
  for (uint64_t o = 0; o < bytes.size(); ++o) bytes[o] = Pattern(o);
  const std::string path = dir.File("pattern");
  EXPECT_TRUE(WriteFileAtomic(path, bytes).ok());
  return path;
}

void ExpectPattern(const std::byte* data, uint64_t offset, uint32_t length) {
  for (uint32_t i = 0; i < length; ++i) {
    ASSERT_EQ(data[i], Pattern(offset + i)) << "at offset " << offset + i;
  }
}

// Random reads of 1..4 blocks; each request its own buffer region.
std::vector<IoRequest> RandomReads(const File& file, AlignedBuffer& buffer, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<IoRequest> requests(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const uint32_t blocks = 1 + static_cast<uint32_t>(rng() % 4);
    const uint64_t first = rng() % (kBlocks - blocks);
    requests[i] = IoRequest{IoKind::kRead, &file, first * kBlock, blocks * kBlock,
                            buffer.data() + uint64_t{static_cast<uint32_t>(i)} * 4 * kBlock, {}};
  }
  return requests;
}

TEST(IoExecutorTest, UringAndPreadReadTheSameBytes) {
  TempDir dir;
  const std::string path = MakePatternFile(dir);
  auto file = File::Open(path, OpenMode::kRead, true);
  ASSERT_TRUE(file.ok());
  auto uring = MakeUringBackend(16);
  if (!uring.ok()) GTEST_SKIP() << "io_uring unavailable: " << uring.status().message();
  IoExecutor uring_exec(std::move(uring).value());
  IoExecutor pread_exec(MakePreadBackend(16));
  constexpr int kRequests = 500;
  AlignedBuffer a(uint64_t{kRequests} * 4 * kBlock, kBlock), b(a.size(), kBlock);
  auto ra = RandomReads(file.value(), a, kRequests, 42);
  auto rb = RandomReads(file.value(), b, kRequests, 42);
  ASSERT_TRUE(uring_exec.Execute(ra).ok());
  ASSERT_TRUE(pread_exec.Execute(rb).ok());
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
  for (const IoRequest& r : ra) ExpectPattern(r.buffer, r.offset_bytes, r.length_bytes);
  EXPECT_EQ(uring_exec.stats().requests, uint64_t{kRequests});
}

TEST(IoExecutorTest, UringWritesAreReadBackByPread) {
  TempDir dir;
  const std::string path = MakePatternFile(dir);
  auto file = File::Open(path, OpenMode::kReadWrite, true);
  ASSERT_TRUE(file.ok());
  auto uring = MakeUringBackend(8);
  if (!uring.ok()) GTEST_SKIP() << "io_uring unavailable";
  IoExecutor exec(std::move(uring).value());
  AlignedBuffer data(16 * kBlock, kBlock);
  std::vector<IoRequest> writes;
  for (uint32_t i = 0; i < 16; ++i) {
    std::memset(data.data() + i * kBlock, static_cast<int>(i + 1), kBlock);
    writes.push_back({IoKind::kWrite, &file.value(), uint64_t{i} * 2 * kBlock, kBlock,
                      data.data() + i * kBlock, {}});
  }
  ASSERT_TRUE(exec.Execute(writes).ok());
  IoExecutor check(MakePreadBackend(4));
  AlignedBuffer back(kBlock, kBlock);
  for (uint32_t i = 0; i < 16; ++i) {
    IoRequest r{IoKind::kRead, &file.value(), uint64_t{i} * 2 * kBlock, kBlock, back.data(), {}};
    ASSERT_TRUE(check.Execute({&r, 1}).ok());
    EXPECT_EQ(back.data()[0], static_cast<std::byte>(i + 1));
    EXPECT_EQ(back.data()[kBlock - 1], static_cast<std::byte>(i + 1));
  }
}

TEST(IoExecutorTest, FinishesShortReads) {
  TempDir dir;
  auto file = File::Open(MakePatternFile(dir), OpenMode::kRead, true);
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->AddRule({IoKind::kRead, 0, 10, FaultType::kShortTransfer, 0, 512, 0});
  AlignedBuffer buffer(64 * 4 * kBlock, kBlock);
  auto requests = RandomReads(file.value(), buffer, 64, 7);
  ASSERT_TRUE(io->executor().Execute(requests).ok());
  for (const IoRequest& r : requests) ExpectPattern(r.buffer, r.offset_bytes, r.length_bytes);
  EXPECT_EQ(io->executor().stats().short_transfers, 10u);
  EXPECT_EQ(fault->faults_fired(), 10u);
}

TEST(IoExecutorTest, RetriesEagainAndEintr) {
  TempDir dir;
  auto file = File::Open(MakePatternFile(dir), OpenMode::kRead, true);
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->AddRule({IoKind::kRead, 3, 2, FaultType::kError, EAGAIN, 0, 0});
  fault->AddRule({IoKind::kRead, 9, 1, FaultType::kError, EINTR, 0, 0});
  AlignedBuffer buffer(32 * 4 * kBlock, kBlock);
  auto requests = RandomReads(file.value(), buffer, 32, 9);
  ASSERT_TRUE(io->executor().Execute(requests).ok());
  for (const IoRequest& r : requests) ExpectPattern(r.buffer, r.offset_bytes, r.length_bytes);
  EXPECT_EQ(io->executor().stats().retries, 3u);
}

TEST(IoExecutorTest, EioBecomesTheRequestsStatusWithPathOffsetLength) {
  TempDir dir;
  auto file = File::Open(MakePatternFile(dir), OpenMode::kRead, true);
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->AddRule({IoKind::kRead, 2, 1, FaultType::kError, EIO, 0, 0});
  AlignedBuffer buffer(8 * kBlock, kBlock);
  std::vector<IoRequest> requests;
  for (uint32_t i = 0; i < 4; ++i) {
    requests.push_back({IoKind::kRead, &file.value(), uint64_t{i} * kBlock, kBlock,
                        buffer.data() + i * kBlock, {}});
  }
  Status s = io->executor().Execute(requests);
  ASSERT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "read " + file->path() + " offset 8192 length 4096: Input/output error");
  EXPECT_TRUE(requests[0].status.ok());
  EXPECT_EQ(requests[2].status.code(), StatusCode::kIoError);
}

TEST(IoExecutorTest, EnospcOnWriteIsReported) {
  TempDir dir;
  auto file = File::Open(MakePatternFile(dir), OpenMode::kReadWrite, true);
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->AddRule({IoKind::kWrite, 0, 1, FaultType::kError, ENOSPC, 0, 0});
  AlignedBuffer buffer(kBlock, kBlock);
  IoRequest w{IoKind::kWrite, &file.value(), 0, kBlock, buffer.data(), {}};
  Status s = io->executor().Execute({&w, 1});
  EXPECT_EQ(s.message(), "write " + file->path() + " offset 0 length 4096: No space left on device");
}

TEST(IoExecutorTest, ReadPastEndOfFileIsCorruption) {
  TempDir dir;
  auto file = File::Open(MakePatternFile(dir), OpenMode::kRead, true);
  auto io = Session(BackendKind::kAuto);
  AlignedBuffer buffer(2 * kBlock, kBlock);
  IoRequest r{IoKind::kRead, &file.value(), uint64_t{kBlocks - 1} * kBlock, 2 * kBlock,
              buffer.data(), {}};
  Status s = io->executor().Execute({&r, 1});
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("file ends at offset 1048576"), std::string::npos) << s.message();
}

TEST(IoExecutorTest, ScriptedOrderExecutesALaterReadBeforeAnEarlierWrite) {
  TempDir dir;
  auto file = File::Open(MakePatternFile(dir), OpenMode::kReadWrite, true);
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->SetReorder([](std::span<IoOp> batch) { std::reverse(batch.begin(), batch.end()); });
  AlignedBuffer out(kBlock, kBlock), in(kBlock, kBlock);
  std::memset(out.data(), 0xAB, kBlock);
  std::vector<IoRequest> both = {{IoKind::kWrite, &file.value(), 0, kBlock, out.data(), {}},
                                 {IoKind::kRead, &file.value(), 0, kBlock, in.data(), {}}};
  ASSERT_TRUE(io->executor().Execute(both).ok());
  // The read ran first: it saw the old bytes. Callers needing order use separate calls.
  EXPECT_EQ(in.data()[0], Pattern(0));
  IoRequest again{IoKind::kRead, &file.value(), 0, kBlock, in.data(), {}};
  ASSERT_TRUE(io->executor().Execute({&again, 1}).ok());
  EXPECT_EQ(in.data()[0], std::byte{0xAB});
}

TEST(IoExecutorTest, InjectedLatencyDelaysCompletion) {
  TempDir dir;
  auto file = File::Open(MakePatternFile(dir), OpenMode::kRead, true);
  FaultBackend* fault = nullptr;
  auto io = FaultSession(&fault);
  fault->AddRule({IoKind::kRead, 0, 3, FaultType::kLatency, 0, 0, 20'000'000});
  AlignedBuffer buffer(3 * kBlock, kBlock);
  std::vector<IoRequest> requests;
  for (uint32_t i = 0; i < 3; ++i) {
    requests.push_back({IoKind::kRead, &file.value(), uint64_t{i} * kBlock, kBlock,
                        buffer.data() + i * kBlock, {}});
  }
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(io->executor().Execute(requests).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(60));
  ExpectPattern(buffer.data(), 0, 3 * kBlock);
}

TEST(IoExecutorTest, StreamKeepsAtMostQueueDepthInFlightAndResubmits) {
  TempDir dir;
  auto file = File::Open(MakePatternFile(dir), OpenMode::kReadWrite, true);
  auto io = Session(BackendKind::kAuto, 4, kBlock);
  std::vector<int> completions(40, 0);
  auto prepare = [&](size_t index, uint32_t slot) {
    EXPECT_LT(slot, 4u);
    IoRequest& r = io->slot_request(slot);
    r = IoRequest{IoKind::kRead, &file.value(), index * kBlock, kBlock, io->slot_buffer(slot), {}};
    return &r;
  };
  auto complete = [&](size_t index, uint32_t, IoRequest& r) {
    if (++completions[index] == 1) {  // read, then write the same bytes back once
      ExpectPattern(r.buffer, index * kBlock, kBlock);
      r.kind = IoKind::kWrite;
      return IoNext::kResubmit;
    }
    return IoNext::kDone;
  };
  ASSERT_TRUE(io->executor().Stream(completions.size(), prepare, complete).ok());
  for (int c : completions) EXPECT_EQ(c, 2);
}

}  // namespace
}  // namespace sluice
