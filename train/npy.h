#pragma once
// .npy files (NumPy format 1.0, little-endian, C order): whole arrays written to a temporary
// name and renamed into place when complete (WriteNpy), or a 2-D array written a row at a time
// in any order (NpyRowWriter), for arrays too large to hold.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/file.h"

namespace sluice {

// descr: NumPy's dtype string ("<f4", "<u8", "<i8"); `bytes` must equal the shape's elements
// times the dtype's width.
Status WriteNpy(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                const void* data, size_t bytes);

// A [rows, cols] array of `elem_bytes`-wide elements written in place at `path` (inside a
// directory that is itself renamed into place when complete, as export's is). Create writes the
// header and reserves the whole file, so a full disk fails there and not halfway; rows written
// in order are gathered into writes of up to 1 MiB. Not thread-safe.
class NpyRowWriter {
 public:
  static Result<NpyRowWriter> Create(const std::string& path, const char* descr, uint64_t rows, uint64_t cols,
                                     uint32_t elem_bytes);
  Status Write(uint64_t row, const void* data);
  Status Read(uint64_t row, void* data);
  // Writes what is gathered and fsyncs.
  Status Close();

 private:
  Status Flush();
  File file_;
  uint64_t data_at_ = 0, rows_ = 0, row_bytes_ = 0;
  std::vector<std::byte> pending_;  // rows [pending_first_, ...) not yet written
  uint64_t pending_first_ = 0;
};

}  // namespace sluice
