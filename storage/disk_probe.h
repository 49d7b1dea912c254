#pragma once
// A short measurement of the disk under a file, for choices made at start-up (the lookahead's
// cost model): random 4 KiB reads at the session's queue depth, and large sequential reads.
// Reads only; O_DIRECT where the file is (otherwise the page cache answers, and the figures say
// so by being large).

#include <cstdint>

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

}  // namespace sluice
