#include "train/lp/node_table.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "common/units.h"
#include "sampler/random.h"
#include "storage/file.h"

namespace sluice {

BlockId NodeTableLayout::block_of(int64_t v) const {
  auto it = std::upper_bound(bounds.begin(), bounds.end(), static_cast<uint64_t>(v));
  return static_cast<BlockId>(it - bounds.begin() - 1);
}

NodeTableLayout MakeNodeTableLayout(const std::vector<uint64_t>& bounds, uint32_t dim) {
  SLUICE_CHECK(bounds.size() >= 2, "a node table needs at least one partition");
  NodeTableLayout l;
  l.dim = dim;
  l.row_bytes = 2 * dim * 4;
  l.bounds = bounds;
  uint64_t largest = 0;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) largest = std::max(largest, bounds[k + 1] - bounds[k]);
  // Rows per block: a multiple of 4096 / gcd(row_bytes, 4096), so a block is whole pages.
  const uint64_t unit = kDirectAlignBytes / std::gcd<uint64_t>(l.row_bytes, kDirectAlignBytes);
  l.rows_per_block = static_cast<uint32_t>(AlignUp(std::max<uint64_t>(largest, 1), unit));
  return l;
}

void InitNodeBlock(const NodeTableLayout& layout, uint64_t seed, uint32_t table, double scale,
                   BlockId b, std::byte* out) {
  std::memset(out, 0, layout.block_bytes());
  const Key table_key = Key(seed).With(0x7AB1E).With(table);
  for (uint64_t v = layout.bounds[b]; v < layout.bounds[b + 1]; ++v) {
    float* row = reinterpret_cast<float*>(out + (v - layout.bounds[b]) * layout.row_bytes);
    const Key k = table_key.With(v);
    for (uint32_t j = 0; j < layout.dim; ++j) {
      row[j] = static_cast<float>((2.0 * k.Unit(j) - 1.0) * scale);
    }
  }
}

Status CreateNodeTable(const std::string& path, const NodeTableLayout& layout, uint64_t seed,
                       uint32_t table, double scale, uint64_t first_row, uint64_t end_row) {
  const std::string temp = path + ".tmp";
  end_row = std::min(end_row, layout.num_rows());
  {
    SLUICE_ASSIGN_OR_RETURN(File file, File::Open(temp, OpenMode::kCreate, false));
    SLUICE_RETURN_IF_ERROR(file.Truncate(layout.num_rows() * layout.row_bytes));
    std::vector<std::byte> block(layout.block_bytes());
    for (BlockId b = 0; b < layout.num_blocks(); ++b) {
      const uint64_t begin = uint64_t{b} * layout.rows_per_block, end = begin + layout.rows_per_block;
      const uint64_t lo = std::max(begin, first_row), hi = std::min(end, end_row);
      if (lo >= hi) continue;
      InitNodeBlock(layout, seed, table, scale, b, block.data());
      SLUICE_RETURN_IF_ERROR(PwriteFull(file, block.data() + (lo - begin) * layout.row_bytes,
                                        (hi - lo) * layout.row_bytes, lo * layout.row_bytes));
    }
    SLUICE_RETURN_IF_ERROR(file.Sync());
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus("rename " + temp + " to " + path, errno);
  }
  return Status::Ok();
}

}  // namespace sluice
