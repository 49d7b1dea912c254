#pragma once
// Public API. Opening a dataset directory written by sluice-prep (manifest.json and its
// arrays): its kind and sizes, checked; optionally every file's CRC-32 verified.
//
// Thread safety: a function of its arguments; call it from any thread.

#include <cstdint>
#include <map>
#include <string>

#include "sluice/status.h"

namespace sluice {

struct DatasetInfo {
  std::string dir;
  std::string task;          // "link_prediction", "recommendation" or "node_classification"
  std::string name;
  uint64_t nodes = 0;        // graph datasets
  uint64_t relations = 0;    // link prediction
  uint64_t partitions = 0;   // node partitions (graph datasets)
  uint64_t feature_dim = 0;  // node classification
  uint64_t classes = 0;      // node classification
  std::map<std::string, uint64_t> edges;    // split -> edges (link prediction)
  std::map<std::string, uint64_t> samples;  // split -> samples (recommendation)
  uint64_t dense_features = 0;   // recommendation: per sample
  uint64_t sparse_features = 0;  // recommendation: categorical features per sample
  uint64_t files = 0;            // files the manifest lists (each with its CRC-32)
  std::string summary;           // what `sluice info` prints
  // With verify: the integer arrays whose ids were checked against their bounds, and the float
  // arrays checked for non-finite values.
  uint64_t verified_id_arrays = 0;
  uint64_t verified_float_arrays = 0;
};

// Opens and checks `dir` (its manifest, every array's size and dtype); with verify, also reads
// every file and checks its CRC-32, its ids against the counts that bound them and its floats
// for non-finite values. Errors name the directory, the file and what is wrong.
Result<DatasetInfo> OpenDataset(const std::string& dir, bool verify = false);

}  // namespace sluice
