#pragma once
// The records of a recommendation split as steps: step s is records [s * batch, (s + 1) *
// batch) of the split's record file (docs/format.md), read sequentially (the sampler stage
// reads them ahead of compute); each record's categorical ids become row keys through the
// task's id map (one table per categorical feature), sample-major.

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "prefetch/row_prefetcher.h"
#include "storage/dataset.h"
#include "storage/file.h"

namespace sluice {

// Checks `count` records of `layout` read from `path` (the first is record `first` of the split
// `where` names, "<dataset>: samples.<split>"): every label 0 or 1, every dense value finite.
// The first bad one is an error naming the record, the field and the file.
Status CheckRecords(const RecordLayout& layout, const std::byte* records, uint64_t count,
                    uint64_t first, const std::string& where, const std::string& path);

class RecordSource {
 public:
  // table, raw id -> row
  using MapId = std::function<RowKey(uint32_t table, uint64_t raw)>;

  // The split's first `max_records` records (0: all) in steps of `batch`; at most `max_steps`
  // steps (0: all).
  static Result<RecordSource> Open(const Dataset& dataset, const std::string& split,
                                   uint64_t batch, uint64_t max_records, uint64_t max_steps,
                                   MapId map);
  uint64_t records() const { return records_; }
  uint64_t steps() const { return steps_; }
  // The records of the steps before `step` (a resumed epoch's skipped ones).
  uint64_t RecordsBefore(uint64_t step) const;
  // Step `step`'s records, sample count and keys into `b`; false past the last step. Reads with
  // pread: call from one thread per source (the sampler stage), not a TBB worker.
  Result<bool> Fill(uint64_t step, RowBatch& b) const;

 private:
  File file_;
  RecordLayout layout_;
  uint64_t batch_ = 0, records_ = 0, steps_ = 0;
  MapId map_;
};

}  // namespace sluice
