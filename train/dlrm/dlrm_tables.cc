#include "train/dlrm/dlrm_tables.h"

#include <algorithm>
#include <cstring>

#include "sampler/random.h"
#include "storage/file.h"

namespace sluice {
namespace {

Result<std::vector<std::pair<uint64_t, uint64_t>>> ReadVocab(const DlrmConfig& config,
                                                             const Dataset& dataset, uint32_t k) {
  const std::string role = "vocab." + std::to_string(k) + ".ids";
  if (!dataset.Has(role)) {
    return InvalidArgument("model.ids: vocab needs the dataset's vocabularies, but " +
                           config.dataset + " has no " + role + " (preprocess with --min-count)");
  }
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, dataset.File(role));
  std::vector<uint64_t> ids(f->elements());
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(dataset.PathOf(*f), OpenMode::kRead, false));
  SLUICE_RETURN_IF_ERROR(
      PreadFull(file, reinterpret_cast<std::byte*>(ids.data()), ids.size() * 8, 0));
  std::vector<std::pair<uint64_t, uint64_t>> v(ids.size());
  for (uint64_t i = 0; i < ids.size(); ++i) v[i] = {ids[i], i};
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

Result<DlrmTables> DlrmTables::Make(const DlrmConfig& config, const Dataset& dataset) {
  DlrmTables t;
  t.tables_ = dataset.manifest().record.sparse;
  t.dim_ = static_cast<uint32_t>(config.model.dim);
  t.opt_ = config.train.optimizer;
  t.width_ = t.dim_ + (config.model.linear ? 1 : 0);
  t.row_bytes_ = 4 * (t.width_ + RowStateFloats(t.opt_, t.width_));
  t.raw_ids_ = config.model.ids == IdMapping::kRaw;
  t.table_rows_ = config.model.table_rows;
  t.seed_ = config.train.seed;
  t.init_scale_ = config.model.init_scale;
  t.adagrad_init_ = config.train.adagrad_init;
  if (config.model.ids == IdMapping::kVocab) {
    for (uint32_t k = 0; k < t.tables_; ++k) {
      SLUICE_ASSIGN_OR_RETURN(auto v, ReadVocab(config, dataset, k));
      t.vocab_.push_back(std::move(v));
    }
  }
  if (!t.raw_ids_) {
    t.offsets_.assign(1, 0);
    for (uint32_t k = 0; k < t.tables_; ++k) {
      const uint64_t rows = t.vocab_.empty() ? t.table_rows_ : t.vocab_[k].size() + 1;
      t.offsets_.push_back(t.offsets_.back() + rows);
    }
  }
  return t;
}

RowKey DlrmTables::MapId(uint32_t table, uint64_t raw) const {
  if (raw_ids_) return RowKey{raw, table};
  if (!vocab_.empty()) {
    const auto& v = vocab_[table];
    auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(raw, uint64_t{0}));
    // Unseen ids share the table's last row.
    const uint64_t row = it != v.end() && it->first == raw ? it->second : v.size();
    return RowKey{row, table};
  }
  return RowKey{raw % table_rows_, table};
}

void DlrmTables::InitRow(const RowKey& key, std::byte* row) const {
  float* f = reinterpret_cast<float*>(row);
  const Key k = Key(seed_).With(0xD1A7AB1E).With(key.table).With(key.id);
  for (uint32_t j = 0; j < dim_; ++j) f[j] = static_cast<float>((2.0 * k.Unit(j) - 1.0) * init_scale_);
  std::memset(row + dim_ * 4, 0, row_bytes_ - dim_ * 4);
  // The optimizer state after the trained floats (none for sgd).
  const auto state = static_cast<float>(adagrad_init_);
  for (uint32_t j = width_; j < row_bytes_ / 4; ++j) f[j] = state;
}

}  // namespace sluice
