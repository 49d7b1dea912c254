#include "storage/disk_probe.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "common/aligned_buffer.h"

namespace sluice {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Issues rounds of requests (one per slot) until `seconds` pass; returns requests done and time.
template <typename Offset>
Result<std::pair<uint64_t, double>> Drive(IoSession& io, const File& file, uint32_t length, uint32_t depth,
                                          double seconds, Offset offset) {
  AlignedBuffer buffer(uint64_t{length} * depth, kDirectAlignBytes);
  std::vector<IoRequest> requests(depth);
  uint64_t done = 0;
  const auto start = Clock::now();
  do {
    for (uint32_t i = 0; i < depth; ++i) {
      requests[i] = IoRequest{IoKind::kRead, &file, offset(done + i), length,
                              buffer.data() + uint64_t{i} * length, {}};
    }
    SLUICE_RETURN_IF_ERROR(io.executor().Execute(requests));
    done += depth;
  } while (Since(start) < seconds);
  return std::make_pair(done, Since(start));
}

}  // namespace

Result<DiskProbe> ProbeDisk(IoSession& io, const File& file, uint64_t file_bytes, double seconds) {
  if (file_bytes < kDirectAlignBytes) {
    return InvalidArgument("disk probe of " + file.path() + ": the file is smaller than one page");
  }
  const auto start = Clock::now();
  const uint64_t pages = file_bytes / kDirectAlignBytes;
  std::mt19937_64 rng(0x5eed);
  SLUICE_ASSIGN_OR_RETURN(auto random,
                          Drive(io, file, kDirectAlignBytes, io.queue_depth(), seconds / 2, [&](uint64_t) {
                            return rng() % pages * kDirectAlignBytes;
                          }));
  constexpr uint64_t kChunk = 1 << 20;
  const uint64_t chunks = std::max<uint64_t>(1, file_bytes / kChunk);
  const uint32_t length = file_bytes >= kChunk ? kChunk : static_cast<uint32_t>(pages * kDirectAlignBytes);
  SLUICE_ASSIGN_OR_RETURN(auto sequential,
                          Drive(io, file, length, std::min<uint32_t>(4, io.queue_depth()), seconds / 2,
                                [&](uint64_t i) { return i % chunks * kChunk; }));
  DiskProbe p;
  p.random_reads_per_s = static_cast<double>(random.first) / std::max(random.second, 1e-9);
  p.sequential_bytes_per_s = static_cast<double>(sequential.first * length) / std::max(sequential.second, 1e-9);
  p.seconds = Since(start);
  return p;
}

Result<std::vector<DepthRate>> ProbeDepths(IoSession& io, const File& file, uint64_t file_bytes,
                                           std::span<const uint32_t> depths, double seconds,
                                           uint64_t first_byte) {
  if (file_bytes < kDirectAlignBytes) {
    return InvalidArgument("disk probe of " + file.path() + ": the file is smaller than one page");
  }
  const uint64_t pages = file_bytes / kDirectAlignBytes, base = first_byte / kDirectAlignBytes * kDirectAlignBytes;
  std::mt19937_64 rng(0x5eed);
  std::vector<DepthRate> rates;
  for (const uint32_t asked : depths) {
    const uint32_t depth = std::clamp<uint32_t>(asked, 1, io.queue_depth());
    SLUICE_ASSIGN_OR_RETURN(auto random,
                            Drive(io, file, kDirectAlignBytes, depth,
                                  seconds / static_cast<double>(depths.size()),
                                  [&](uint64_t) { return base + rng() % pages * kDirectAlignBytes; }));
    rates.push_back(DepthRate{depth, static_cast<double>(random.first) / std::max(random.second, 1e-9)});
  }
  return rates;
}

namespace {

std::string Thousands(double x) {
  return x >= 1000 ? std::to_string(static_cast<int64_t>(x / 1000 + 0.5)) + "k"
                   : std::to_string(static_cast<int64_t>(x + 0.5));
}

}  // namespace

DepthChoice ChooseQueueDepth(std::vector<DepthRate> rates, double tolerance) {
  std::sort(rates.begin(), rates.end(), [](const DepthRate& a, const DepthRate& b) { return a.depth < b.depth; });
  double best = 0;
  for (const DepthRate& r : rates) best = std::max(best, r.reads_per_s);
  DepthChoice c;
  for (const DepthRate& r : rates) {
    if (r.reads_per_s >= (1 - tolerance) * best) {
      c.depth = r.depth;
      break;
    }
  }
  std::string list;
  for (const DepthRate& r : rates) {
    list += (list.empty() ? "" : ", ") + std::to_string(r.depth) + ": " + Thousands(r.reads_per_s);
  }
  c.reason = std::to_string(c.depth) + " (auto: the shallowest within " +
             std::to_string(static_cast<int>(tolerance * 100 + 0.5)) +
             "% of the best random 4 KiB reads/s, " + list + ")";
  c.rates = std::move(rates);
  return c;
}

Result<DepthChoice> ProbeQueueDepth(const std::string& path, uint64_t first_byte, uint64_t file_bytes,
                                    const IoConfig& io, uint64_t budget_bytes) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t most = std::clamp<uint64_t>(budget_bytes / 50 / std::max<uint64_t>(io.merge_max.value, 1), 4, 256);
  std::vector<uint32_t> depths;
  for (uint32_t d = 4; d <= most; d *= 2) depths.push_back(d);
  IoConfig probe = io;
  probe.queue_depth = static_cast<int>(depths.back());
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kRead, io.direct));
  SLUICE_ASSIGN_OR_RETURN(auto session, IoSession::Create(probe));
  SLUICE_ASSIGN_OR_RETURN(std::vector<DepthRate> rates, ProbeDepths(*session, file, file_bytes, depths, 0.5, first_byte));
  DepthChoice choice = ChooseQueueDepth(std::move(rates));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char text[64];
  std::snprintf(text, sizeof text, " (%.1f s at start-up)", took);
  choice.reason += text;
  return choice;
}

}  // namespace sluice
