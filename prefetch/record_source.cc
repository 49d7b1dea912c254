#include "prefetch/record_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace sluice {

Status CheckRecords(const RecordLayout& layout, const std::byte* records, uint64_t count,
                    uint64_t first, const std::string& where, const std::string& path) {
  for (uint64_t i = 0; i < count; ++i) {
    const std::byte* r = records + i * layout.bytes();
    float label;
    std::memcpy(&label, r + layout.label_offset(), 4);
    const auto record = [&] { return where + " record " + std::to_string(first + i); };
    if (label != 0.0f && label != 1.0f) {
      return InvalidArgument(record() + ": label " + std::to_string(label) + " is not 0 or 1");
    }
    for (uint32_t k = 0; k < layout.dense; ++k) {
      float v;
      std::memcpy(&v, r + layout.dense_offset() + 4 * k, 4);
      if (!std::isfinite(v)) {
        return InvalidArgument(record() + ": dense feature " + std::to_string(k) + " is " +
                               (std::isnan(v) ? "nan" : "infinite") + " (in " + path +
                               "; fix the data: sluice_prep writes only finite values)");
      }
    }
  }
  return Status::Ok();
}

Result<RecordSource> RecordSource::Open(const Dataset& dataset, const std::string& split,
                                        uint64_t batch, uint64_t max_records, uint64_t max_steps,
                                        MapId map) {
  RecordSource s;
  const auto& samples = dataset.manifest().samples;
  auto it = samples.find(split);
  if (it == samples.end() || it->second == 0) {
    return NotFound("dataset " + dataset.dir() + " has no samples." + split);
  }
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset.File("samples." + split));
  SLUICE_ASSIGN_OR_RETURN(s.file_, File::Open(dataset.PathOf(*f), OpenMode::kRead, false));
  s.layout_ = dataset.manifest().record;
  s.batch_ = batch;
  s.records_ = max_records > 0 ? std::min(it->second, max_records) : it->second;
  s.steps_ = (s.records_ + batch - 1) / batch;
  if (max_steps > 0) s.steps_ = std::min(s.steps_, max_steps);
  s.map_ = std::move(map);
  return s;
}

uint64_t RecordSource::RecordsBefore(uint64_t step) const {
  return std::min(records_, std::min(step, steps_) * batch_);
}

Result<bool> RecordSource::Fill(uint64_t step, RowBatch& b) const {
  if (step >= steps_) return false;
  const uint32_t rb = layout_.bytes(), tables = layout_.sparse;
  const uint64_t lo = step * batch_, count = std::min(batch_, records_ - lo);
  b.records.resize(count * rb);
  SLUICE_RETURN_IF_ERROR(PreadFull(file_, b.records.data(), b.records.size(), lo * rb));
  b.samples = static_cast<uint32_t>(count);
  b.keys.resize(count * tables);
  for (uint64_t i = 0; i < count; ++i) {
    const std::byte* r = b.records.data() + i * rb;
    for (uint32_t f = 0; f < tables; ++f) {
      uint64_t raw;
      std::memcpy(&raw, r + 8 * f, 8);
      b.keys[i * tables + f] = map_(f, raw);
    }
  }
  return true;
}

}  // namespace sluice
