#pragma once
// How a recommendation log's raw categorical ids become rows of learnable tables: the row layout
// (embedding, then the linear term's weight, then the row optimizer's state, so one read brings
// all of it), the id mapping (modulo the table size, the dataset's vocabulary, or raw 64-bit
// ids), and each row's initial value (a pure function of seed, table and id).

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cache/row_cache.h"
#include "common/status.h"
#include "storage/dataset.h"
#include "train/dlrm/dlrm_config.h"
#include "train/row_optimizers.h"

namespace sluice {

class DlrmTables {
 public:
  // Reads the vocabularies when model.ids is vocab.
  static Result<DlrmTables> Make(const DlrmConfig& config, const Dataset& dataset);

  uint32_t tables() const { return tables_; }
  uint32_t dim() const { return dim_; }
  uint32_t width() const { return width_; }  // floats trained per row: dim (+1 linear)
  uint32_t row_bytes() const { return row_bytes_; }
  RowOptimizer optimizer() const { return opt_; }
  bool raw_ids() const { return raw_ids_; }
  bool has_vocab() const { return !vocab_.empty(); }
  // Dense tables: table k's row i is row offsets()[k] + i of one row file; empty with raw ids.
  const std::vector<uint64_t>& offsets() const { return offsets_; }
  // Rows of the dense tables; 0 with raw ids (rows are created on first use).
  uint64_t total_rows() const { return offsets_.empty() ? 0 : offsets_.back(); }
  // Table `table`'s (raw id, row) pairs sorted by raw id (vocab ids only).
  const std::vector<std::pair<uint64_t, uint64_t>>& vocab(uint32_t table) const {
    return vocab_[table];
  }

  RowKey MapId(uint32_t table, uint64_t raw) const;
  // Writes the row's initial value (row_bytes() bytes).
  void InitRow(const RowKey& key, std::byte* row) const;

 private:
  uint32_t tables_ = 0, dim_ = 0, width_ = 0, row_bytes_ = 0;
  RowOptimizer opt_ = RowOptimizer::kRowwiseAdagrad;
  bool raw_ids_ = false;
  uint64_t table_rows_ = 0, seed_ = 0;
  double init_scale_ = 0, adagrad_init_ = 0;
  std::vector<uint64_t> offsets_;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> vocab_;
};

}  // namespace sluice
