#pragma once
// The on-disk dataset (docs/format.md): a directory with manifest.json and little-endian
// fixed-width binary arrays. Opening checks the manifest's fields, every file's size against its
// dtype and shape, partition bounds and edge-bucket offsets, and says precisely what is wrong.
// Full checksums are verified on request (Verify). A dataset is read-only to everything but
// the preprocessing that writes it (DatasetWriter here; scripts/ in Python).

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace sluice {

inline constexpr int kDatasetFormatVersion = 1;
inline constexpr const char* kDatasetFormatName = "sluice-dataset";
inline constexpr const char* kManifestName = "manifest.json";

enum class TaskKind { kLinkPrediction, kNodeClassification, kRecommendation };
const char* TaskKindName(TaskKind task);
Result<TaskKind> ParseTaskKind(const std::string& name);

// Element types of arrays. "record" is a recommendation sample (see RecordLayout).
enum class DType { kInt32, kInt64, kUInt8, kUInt64, kFloat16, kFloat32, kRecord };
const char* DTypeName(DType dtype);
Result<DType> ParseDType(const std::string& name);

// One sample: uint64 sparse[sparse]; float32 dense[dense]; float32 label; zero padding to a
// multiple of 8 bytes.
struct RecordLayout {
  uint32_t sparse = 0;
  uint32_t dense = 0;
  uint32_t bytes() const { return (8 * sparse + 4 * dense + 4 + 7) / 8 * 8; }
  uint32_t dense_offset() const { return 8 * sparse; }
  uint32_t label_offset() const { return 8 * sparse + 4 * dense; }
};

struct DatasetFile {
  std::string role;  // e.g. "edges.train.src"; the key in the manifest's "files"
  std::string path;  // relative to the dataset directory
  DType dtype = DType::kUInt8;
  std::vector<uint64_t> shape;
  uint64_t bytes = 0;
  std::optional<uint32_t> crc32;  // zlib's CRC-32 of the whole file
  // Content checks recorded by the preprocessing that wrote it: an integer array's smallest and
  // largest value, and that a float array holds only finite values.
  std::optional<std::pair<int64_t, int64_t>> range;
  bool finite = false;

  uint64_t elements() const;
};

struct Manifest {
  int format_version = kDatasetFormatVersion;
  TaskKind task = TaskKind::kLinkPrediction;
  std::string name;
  uint64_t num_nodes = 0;
  uint64_t num_relations = 0;
  std::map<std::string, uint64_t> edges;    // split -> edge count
  std::map<std::string, uint64_t> samples;  // split -> record count (recommendation)
  uint64_t feature_dim = 0;
  uint64_t num_classes = 0;
  RecordLayout record;
  std::vector<uint64_t> partition_bounds;   // partition k is [bounds[k], bounds[k+1])
  std::map<std::string, DatasetFile> files;
  std::string stats_json = "{}";            // free-form statistics, kept verbatim

  uint32_t num_partitions() const {
    return partition_bounds.empty() ? 0 : static_cast<uint32_t>(partition_bounds.size() - 1);
  }
  std::string ToJson() const;
  // Parses manifest.json's text; `where` names it in errors. Fields only: Dataset::Open also
  // checks them against each other and the files.
  static Result<Manifest> Parse(const std::string& text, const std::string& where);
};

class Dataset {
 public:
  // Opens and checks `dir`. Errors name the directory, the file or field, and what is wrong.
  static Result<Dataset> Open(const std::string& dir);

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  bool Has(const std::string& role) const { return manifest_.files.count(role) != 0; }
  // The file of `role`; NotFound naming the role if the dataset lacks it.
  Result<const DatasetFile*> File(const std::string& role) const;
  std::string PathOf(const DatasetFile& file) const { return dir_ + "/" + file.path; }
  // Reads a whole array of `role`, checking its dtype matches T.
  // An int32 or int64 array, as int64.
  Result<std::vector<int64_t>> ReadInt64(const std::string& role) const;
  // What Verify read.
  struct VerifyReport {
    uint64_t files = 0;         // CRC-32 checked
    uint64_t id_arrays = 0;     // integer arrays whose every value is within its bounds
    uint64_t float_arrays = 0;  // float arrays whose every value is finite
  };
  // Reads everything: every file's CRC-32 (files without one are reported), every id array's
  // values against the counts that bound them (node ids below counts.nodes, relation ids below
  // counts.relations, labels in [-1, counts.classes)) and against the range the manifest
  // records, every float array for non-finite values. The first problem is one error naming the
  // file, the index or row and the bound.
  Result<VerifyReport> Verify() const;
  // A multi-line human summary (for `sluice info`).
  std::string Summary() const;

 private:
  Status CheckFiles() const;
  Status CheckPartitions() const;
  Status CheckBuckets() const;
  Status CheckRecordedRanges() const;

  std::string dir_;
  Manifest manifest_;
};

// Writes a dataset: arrays go into "<dir>.tmp-<pid>" with their CRC-32 computed as written;
// Commit writes the manifest and renames the directory into place. Destroying an uncommitted
// writer removes the temporary directory, so no half-dataset is ever visible at `dir`.
class DatasetWriter {
 public:
  static Result<DatasetWriter> Begin(const std::string& dir, Manifest manifest);
  ~DatasetWriter();
  DatasetWriter(DatasetWriter&& other) noexcept;
  DatasetWriter& operator=(DatasetWriter&&) = delete;
  DatasetWriter(const DatasetWriter&) = delete;

  Manifest& manifest() { return manifest_; }
  Status AddArray(const std::string& role, const std::string& path, DType dtype,
                  std::vector<uint64_t> shape, std::span<const std::byte> bytes);
  template <typename T>
  Status AddArray(const std::string& role, const std::string& path, DType dtype,
                  std::vector<uint64_t> shape, std::span<const T> values) {
    return AddArray(role, path, dtype, std::move(shape), std::as_bytes(values));
  }
  // Checks the result by opening it from the temporary directory, then renames it into place
  // (replacing an existing dataset at `dir`).
  Status Commit();

 private:
  DatasetWriter(std::string dir, std::string temp_dir, Manifest manifest)
      : dir_(std::move(dir)), temp_dir_(std::move(temp_dir)), manifest_(std::move(manifest)) {}
  std::string dir_;
  std::string temp_dir_;
  Manifest manifest_;
  bool committed_ = false;
};

uint32_t DTypeBytes(DType dtype, const RecordLayout& record);

// The values an integer array of `role` may hold, [lo, hi), from the manifest's counts, with the
// count that bounds it ("counts.nodes"); nullopt for arrays without such a bound.
struct IdBounds {
  int64_t lo = 0, hi = 0;
  const char* field = "";
};
std::optional<IdBounds> BoundsOf(const Manifest& manifest, const std::string& role);

}  // namespace sluice
