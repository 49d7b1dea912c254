#pragma once
// A short measurement of the disk under a file, for choices made at start-up (the lookahead's
// cost model): random 4 KiB reads at the session's queue depth, and large sequential reads.
// Reads only; O_DIRECT where the file is (otherwise the page cache answers, and the figures say
// so by being large).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/file.h"
#include "storage/io_session.h"

namespace sluice {

struct DiskProbe {
  double random_reads_per_s = 0;  // 4 KiB reads at random aligned offsets
  double sequential_bytes_per_s = 0;
  double seconds = 0;             // the probe's own time
};

// Reads `file` (its first file_bytes) for about `seconds` in all, half random and half
// sequential (1 MiB requests). The file must be at least 4 KiB long.
Result<DiskProbe> ProbeDisk(IoSession& io, const File& file, uint64_t file_bytes, double seconds);

// io.queue_depth 0: the depth a run's io rings use, from random 4 KiB reads of its own row file
// at several depths. The deepest queue is not free (each slot stages a merged read: depth x
// io.merge_max bytes of the budget) nor always faster (a disk saturates), so the choice is the
// shallowest depth within `tolerance` of the best rate measured.
struct DepthRate {
  uint32_t depth = 0;
  double reads_per_s = 0;
};

// Random 4 KiB reads at each depth (each at most io.queue_depth()), `seconds` shared evenly, of
// the file's file_bytes from the page holding first_byte.
Result<std::vector<DepthRate>> ProbeDepths(IoSession& io, const File& file, uint64_t file_bytes,
                                           std::span<const uint32_t> depths, double seconds,
                                           uint64_t first_byte = 0);

struct DepthChoice {
  uint32_t depth = 0;
  std::vector<DepthRate> rates;
  std::string reason;  // the summary's line, e.g. "32 (auto: ... 4: 41k, 8: 60k, ...)"
};

// The shallowest depth whose rate is at least (1 - tolerance) of the best. Requires: rates not
// empty.
DepthChoice ChooseQueueDepth(std::vector<DepthRate> rates, double tolerance = 0.1);

// The probe a run makes at start-up for io.queue_depth 0: depths 4, 8, ... up to what 2% of
// `budget_bytes` stages in merged reads (io.merge_max each; never under 4, at most 256), half a
// second of random reads of `path` (its file_bytes from first_byte: rows the run stores, not a
// sparse file's holes) in all; the reason ends with the probe's own seconds.
Result<DepthChoice> ProbeQueueDepth(const std::string& path, uint64_t first_byte, uint64_t file_bytes,
                                    const IoConfig& io, uint64_t budget_bytes);

}  // namespace sluice
