#pragma once
// A learnable node table in the run directory (never in the dataset): one row per node holding
// its embedding and its Adagrad state (dim floats each), so one read brings both. Partition k
// of the dataset is block k of the table: rows_per_block rows (the largest partition, rounded
// up so a block is a whole number of 4 KiB pages and moves by O_DIRECT straight into a cache
// slot); node v lives at row k * rows_per_block + (v - bounds[k]).
//
// A row's initial value is a pure function of (seed, table, node id), so a table can be
// re-created identically and in-memory and out-of-core runs start from the same rows.

#include <cstdint>
#include <string>
#include <vector>

#include "cache/trace.h"
#include "common/status.h"
#include "storage/io_session.h"

namespace sluice {

struct NodeTableLayout {
  uint32_t dim = 0;
  uint32_t row_bytes = 0;  // 2 * dim * 4: embedding, then Adagrad state
  uint32_t rows_per_block = 0;
  std::vector<uint64_t> bounds;  // partition k is nodes [bounds[k], bounds[k+1])

  uint32_t num_blocks() const { return static_cast<uint32_t>(bounds.size() - 1); }
  uint64_t num_rows() const { return uint64_t{num_blocks()} * rows_per_block; }
  uint64_t num_nodes() const { return bounds.back(); }
  uint64_t block_bytes() const { return uint64_t{rows_per_block} * row_bytes; }
  BlockId block_of(int64_t v) const;
  uint64_t row_of(int64_t v) const {
    const BlockId b = block_of(v);
    return uint64_t{b} * rows_per_block + static_cast<uint64_t>(v) - bounds[b];
  }
};

NodeTableLayout MakeNodeTableLayout(const std::vector<uint64_t>& bounds, uint32_t dim);

// Fills block b's rows (layout.block_bytes() at out): embeddings uniform in [-scale, scale]
// from (seed, table, node), Adagrad state 0; padding rows 0.
void InitNodeBlock(const NodeTableLayout& layout, uint64_t seed, uint32_t table, double scale,
                   BlockId b, std::byte* out);

// Writes a freshly initialised table to `path` (a temporary name, renamed when complete): table
// rows [first_row, end_row) initialised, the file as long as the whole table and the other rows
// holes (a rank's rows across processes: the others are never read there, nor stored).
Status CreateNodeTable(const std::string& path, const NodeTableLayout& layout, uint64_t seed,
                       uint32_t table, double scale, uint64_t first_row = 0,
                       uint64_t end_row = ~uint64_t{0});

}  // namespace sluice
