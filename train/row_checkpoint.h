#pragma once
// Learned dense row tables in checkpoints, for every task that trains rows (DLRM's tables,
// node classification's learnable node embeddings): rows held in RAM written in the row file's
// layout and read back, and a checkpoint's row file restored into the run's tables directory.

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "prefetch/row_prefetcher.h"

namespace sluice {

// Streams a record of `record_bytes` per row of `rows` (ForEach's order; `encode` writes it
// from the row) to `path` in chunks (a copy of the whole table would double the resident set),
// zero-pads the file to `pad_to` bytes (0: no padding) and syncs it.
Status WriteRowRecords(MemoryRows& rows, const std::string& path, uint32_t record_bytes,
                       const std::function<void(const RowKey&, const std::byte*, std::byte*)>& encode,
                       uint64_t pad_to);
// Writes dense `rows` (total_rows of them) to `path` in the row file's layout (streamed in
// chunks, padded as RowFile::FileBytes says) and syncs it.
Status WriteDenseRows(MemoryRows& rows, const std::string& path, uint64_t total_rows);
// Reads `path` (written by WriteDenseRows or a row file of the same shape) into dense `rows`;
// a file of another size is Corruption naming both sizes.
Status LoadDenseRows(MemoryRows& rows, const std::string& path, uint64_t total_rows);
// Copies `dir`/`name` to `tables_dir`/`name` (through a temporary name, renamed when complete).
Status RestoreRowFile(const std::string& dir, const std::string& name, const std::string& tables_dir);

}  // namespace sluice
