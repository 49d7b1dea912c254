#include "storage/dataset.h"

#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

#include "common/json.h"
#include "common/units.h"
#include "storage/file.h"

namespace sluice {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSplits[] = {"train", "valid", "test"};

// Field access on the parsed manifest with errors that name the field.
class Fields {
 public:
  Fields(const YAML::Node& node, std::string where) : node_(node), where_(std::move(where)) {}

  Result<YAML::Node> Get(const std::string& key) const {
    if (!node_.IsMap()) return InvalidArgument(where_ + ": must be an object (looking for '" + key + "')");
    YAML::Node child = node_[key];
    if (!child) return InvalidArgument(where_ + ": manifest is missing the field '" + key + "'");
    return child;
  }
  template <typename T>
  Result<T> As(const std::string& key) const {
    SLUICE_ASSIGN_OR_RETURN(YAML::Node child, Get(key));
    try {
      return child.as<T>();
    } catch (const YAML::Exception&) {
      return InvalidArgument(where_ + ": manifest field '" + key + "' has the wrong type (line " +
                             std::to_string(child.Mark().line + 1) + ")");
    }
  }
  template <typename T>
  Result<T> AsOr(const std::string& key, T fallback) const {
    if (!node_.IsMap()) return InvalidArgument(where_ + ": must be an object (looking for '" + key + "')");
    if (!node_[key]) return fallback;
    return As<T>(key);
  }

 private:
  YAML::Node node_;
  std::string where_;
};

Result<uint32_t> ParseCrc(const std::string& text, const std::string& where) {
  unsigned long value = 0;
  if (std::sscanf(text.c_str(), "%lx", &value) != 1 || value > 0xffffffffUL) {
    return InvalidArgument(where + ": bad crc32 '" + text + "'");
  }
  return static_cast<uint32_t>(value);
}

Result<DatasetFile> ParseFile(const std::string& role, const YAML::Node& node,
                              const std::string& where) {
  Fields f(node, where + ": files." + role);
  if (!node.IsMap()) return InvalidArgument(where + ": files." + role + " must be an object");
  DatasetFile file;
  file.role = role;
  SLUICE_ASSIGN_OR_RETURN(file.path, f.As<std::string>("path"));
  SLUICE_ASSIGN_OR_RETURN(std::string dtype, f.As<std::string>("dtype"));
  {
    Result<DType> parsed = ParseDType(dtype);
    if (!parsed.ok()) return parsed.status().WithContext(where + ": files." + role + ".dtype");
    file.dtype = *parsed;
  }
  SLUICE_ASSIGN_OR_RETURN(file.shape, f.As<std::vector<uint64_t>>("shape"));
  SLUICE_ASSIGN_OR_RETURN(file.bytes, f.As<uint64_t>("bytes"));
  if (node["crc32"]) {
    SLUICE_ASSIGN_OR_RETURN(std::string crc, f.As<std::string>("crc32"));
    SLUICE_ASSIGN_OR_RETURN(file.crc32, ParseCrc(crc, where + ": files." + role));
  }
  if (node["range"]) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> range, f.As<std::vector<int64_t>>("range"));
    if (range.size() != 2 || range[0] > range[1]) {
      return InvalidArgument(where + ": files." + role + ".range must be [smallest, largest]");
    }
    file.range = std::make_pair(range[0], range[1]);
  }
  SLUICE_ASSIGN_OR_RETURN(file.finite, f.AsOr<bool>("finite", false));
  if (file.path.empty() || file.path[0] == '/' || file.path.find("..") != std::string::npos) {
    return InvalidArgument(where + ": files." + role + ".path must be relative inside the dataset");
  }
  return file;
}

// Re-emits a parsed JSON value as JSON: numbers, booleans and null stay bare, other scalars are
// quoted (yaml-cpp keeps no scalar types, so a quoted "12" comes back as a number).
// JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. (strtod also takes
// " 0", "inf", "0x1p3", ".5": written bare, those would not read back as the same value.)
bool IsJsonNumber(const std::string& v) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    return i > start;
  };
  if (i < v.size() && v[i] == '-') ++i;
  if (i < v.size() && v[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < v.size() && v[i] == '.' && (++i, !digits())) return false;
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == v.size();
}

// Every key of a map, at any depth, a plain name (IsPlainKey), so the JSON reads back.
bool PlainKeys(const YAML::Node& node) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (!kv.first.IsScalar() || !IsPlainKey(kv.first.Scalar()) || !PlainKeys(kv.second)) return false;
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      if (!PlainKeys(item)) return false;
    }
  }
  return true;
}

std::string ToJson(const YAML::Node& node) {
  if (node.IsMap()) {
    std::string out = "{";
    for (const auto& kv : node) {
      out += (out.size() > 1 ? ", " : "") + JsonString(kv.first.Scalar()) + ": " + ToJson(kv.second);
    }
    return out + "}";
  }
  if (node.IsSequence()) {
    std::string out = "[";
    for (const auto& item : node) out += (out.size() > 1 ? ", " : "") + ToJson(item);
    return out + "]";
  }
  if (!node.IsScalar()) return "null";
  const std::string& v = node.Scalar();
  if (v == "true" || v == "false" || v == "null" || IsJsonNumber(v)) return v;
  return JsonString(v);
}

Result<Manifest> ParseManifestFields(const std::string& text, const std::string& where);

// Any yaml-cpp exception the field checks did not foresee (a key that is not a scalar, ...) is
// one error naming the manifest, never an escaped exception.
Result<Manifest> ParseManifest(const std::string& text, const std::string& where) {
  try {
    return ParseManifestFields(text, where);
  } catch (const YAML::Exception& e) {
    return Corruption(where + ": malformed manifest: " + e.msg);
  }
}

Result<Manifest> ParseManifestFields(const std::string& text, const std::string& where) {
  if (std::string why = Utf8Problem(text, where); !why.empty()) return Corruption(why);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return Corruption(where + ":" + std::to_string(e.mark.line + 1) + ": malformed manifest: " +
                      e.msg);
  }
  if (!root.IsMap()) return Corruption(where + ": manifest is not a JSON object");
  Fields f(root, where);
  Manifest m;
  SLUICE_ASSIGN_OR_RETURN(std::string format, f.As<std::string>("format"));
  if (format != kDatasetFormatName) {
    return InvalidArgument(where + ": format is '" + format + "', not '" + kDatasetFormatName + "'");
  }
  SLUICE_ASSIGN_OR_RETURN(m.format_version, f.As<int>("format_version"));
  if (m.format_version != kDatasetFormatVersion) {
    return InvalidArgument(where + ": dataset format version " + std::to_string(m.format_version) +
                           ", but this build of sluice reads version " +
                           std::to_string(kDatasetFormatVersion) + " (re-run the preprocessing)");
  }
  SLUICE_ASSIGN_OR_RETURN(std::string task, f.As<std::string>("task"));
  {
    Result<TaskKind> parsed = ParseTaskKind(task);
    if (!parsed.ok()) return parsed.status().WithContext(where + ": task");
    m.task = *parsed;
  }
  SLUICE_ASSIGN_OR_RETURN(m.name, f.AsOr<std::string>("name", ""));
  SLUICE_ASSIGN_OR_RETURN(YAML::Node counts_node, f.Get("counts"));
  Fields counts(counts_node, where + ": counts");
  SLUICE_ASSIGN_OR_RETURN(m.num_nodes, counts.AsOr<uint64_t>("nodes", 0));
  SLUICE_ASSIGN_OR_RETURN(m.num_relations, counts.AsOr<uint64_t>("relations", 0));
  SLUICE_ASSIGN_OR_RETURN(m.feature_dim, counts.AsOr<uint64_t>("feature_dim", 0));
  SLUICE_ASSIGN_OR_RETURN(m.num_classes, counts.AsOr<uint64_t>("classes", 0));
  using Counts = std::map<std::string, uint64_t>;
  SLUICE_ASSIGN_OR_RETURN(m.edges, counts.AsOr<Counts>("edges", {}));
  SLUICE_ASSIGN_OR_RETURN(m.samples, counts.AsOr<Counts>("samples", {}));
  if (m.task == TaskKind::kRecommendation) {
    SLUICE_ASSIGN_OR_RETURN(YAML::Node record_node, f.Get("record"));
    Fields record(record_node, where + ": record");
    SLUICE_ASSIGN_OR_RETURN(m.record.sparse, record.As<uint32_t>("sparse"));
    SLUICE_ASSIGN_OR_RETURN(m.record.dense, record.As<uint32_t>("dense"));
    SLUICE_ASSIGN_OR_RETURN(uint32_t bytes, record.As<uint32_t>("bytes"));
    if (bytes != m.record.bytes()) {
      return Corruption(where + ": record.bytes is " + std::to_string(bytes) + " but " +
                        std::to_string(m.record.sparse) + " sparse and " +
                        std::to_string(m.record.dense) + " dense fields take " +
                        std::to_string(m.record.bytes()));
    }
  } else {
    SLUICE_ASSIGN_OR_RETURN(YAML::Node partitions_node, f.Get("partitions"));
    Fields partitions(partitions_node, where + ": partitions");
    SLUICE_ASSIGN_OR_RETURN(m.partition_bounds, partitions.As<std::vector<uint64_t>>("bounds"));
    SLUICE_ASSIGN_OR_RETURN(uint64_t count, partitions.AsOr<uint64_t>("count", m.partition_bounds.size() - 1));
    if (m.partition_bounds.empty() || count != m.partition_bounds.size() - 1) {
      return Corruption(where + ": partitions.count is " + std::to_string(count) + " but partitions.bounds has " +
                        std::to_string(m.partition_bounds.size()) + " entries (count + 1 expected)");
    }
  }
  SLUICE_ASSIGN_OR_RETURN(YAML::Node files, f.Get("files"));
  if (!files.IsMap()) return Corruption(where + ": files must be an object");
  for (const auto& kv : files) {
    const std::string role = kv.first.as<std::string>();
    if (!IsPlainKey(role)) return Corruption(where + ": files: a role that is not a name (control characters, or over 256 bytes)");
    SLUICE_ASSIGN_OR_RETURN(DatasetFile file, ParseFile(role, kv.second, where));
    m.files.emplace(role, std::move(file));
  }
  if (root["stats"]) {
    if (!PlainKeys(root["stats"])) return Corruption(where + ": stats: a key that is not a name");
    m.stats_json = ToJson(root["stats"]);
  }
  // yaml-cpp turns a \xNN escape into a raw byte: strings must still be UTF-8 to be written back.
  if (std::string why = Utf8Problem(m.ToJson(), where + " (after its escapes)"); !why.empty()) {
    return Corruption(why);
  }
  return m;
}

std::string JsonCounts(const std::map<std::string, uint64_t>& counts) {
  std::string out = "{";
  for (const auto& [k, v] : counts) {
    out += (out.size() > 1 ? ", " : "") + JsonString(k) + ": " + std::to_string(v);
  }
  return out + "}";
}

}  // namespace

const char* TaskKindName(TaskKind task) {
  switch (task) {
    case TaskKind::kLinkPrediction: return "link_prediction";
    case TaskKind::kNodeClassification: return "node_classification";
    case TaskKind::kRecommendation: return "recommendation";
  }
  return "?";
}

Result<TaskKind> ParseTaskKind(const std::string& name) {
  for (TaskKind t : {TaskKind::kLinkPrediction, TaskKind::kNodeClassification,
                     TaskKind::kRecommendation}) {
    if (name == TaskKindName(t)) return t;
  }
  return InvalidArgument("unknown task '" + name +
                         "' (expected link_prediction, node_classification or recommendation)");
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kUInt64: return "uint64";
    case DType::kFloat16: return "float16";
    case DType::kFloat32: return "float32";
    case DType::kRecord: return "record";
  }
  return "?";
}

Result<DType> ParseDType(const std::string& name) {
  for (DType d : {DType::kInt32, DType::kInt64, DType::kUInt8, DType::kUInt64, DType::kFloat16,
                  DType::kFloat32, DType::kRecord}) {
    if (name == DTypeName(d)) return d;
  }
  return InvalidArgument("unknown dtype '" + name + "'");
}

uint32_t DTypeBytes(DType dtype, const RecordLayout& record) {
  switch (dtype) {
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
    case DType::kUInt64: return 8;
    case DType::kFloat16: return 2;
    case DType::kFloat32: return 4;
    case DType::kRecord: return record.bytes();
  }
  return 0;
}

uint64_t DatasetFile::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string Manifest::ToJson() const {
  std::ostringstream out;
  out << "{\n  \"format\": " << JsonString(kDatasetFormatName) << ",\n"
      << "  \"format_version\": " << format_version << ",\n"
      << "  \"task\": " << JsonString(TaskKindName(task)) << ",\n"
      << "  \"name\": " << JsonString(name) << ",\n"
      << "  \"counts\": {\"nodes\": " << num_nodes << ", \"relations\": " << num_relations
      << ", \"feature_dim\": " << feature_dim << ", \"classes\": " << num_classes
      << ", \"edges\": " << JsonCounts(edges) << ", \"samples\": " << JsonCounts(samples)
      << "},\n";
  if (task == TaskKind::kRecommendation) {
    out << "  \"record\": {\"sparse\": " << record.sparse << ", \"dense\": " << record.dense
        << ", \"bytes\": " << record.bytes() << "},\n";
  } else {
    out << "  \"partitions\": {\"count\": " << num_partitions() << ", \"bounds\": [";
    for (size_t i = 0; i < partition_bounds.size(); ++i) {
      out << (i ? ", " : "") << partition_bounds[i];
    }
    out << "]},\n";
  }
  out << "  \"files\": {";
  bool first = true;
  for (const auto& [role, f] : files) {
    out << (first ? "\n" : ",\n") << "    " << JsonString(role) << ": {\"path\": "
        << JsonString(f.path) << ", \"dtype\": " << JsonString(DTypeName(f.dtype))
        << ", \"shape\": [";
    for (size_t i = 0; i < f.shape.size(); ++i) out << (i ? ", " : "") << f.shape[i];
    out << "], \"bytes\": " << f.bytes;
    if (f.crc32) {
      char crc[16];
      std::snprintf(crc, sizeof(crc), "%08x", *f.crc32);
      out << ", \"crc32\": \"" << crc << "\"";
    }
    if (f.range) out << ", \"range\": [" << f.range->first << ", " << f.range->second << "]";
    if (f.finite) out << ", \"finite\": true";
    out << "}";
    first = false;
  }
  out << "\n  },\n  \"stats\": " << stats_json << "\n}\n";
  return out.str();
}

Result<Manifest> Manifest::Parse(const std::string& text, const std::string& where) {
  return ParseManifest(text, where);
}

Result<Dataset> Dataset::Open(const std::string& dir) {
  Dataset ds;
  ds.dir_ = dir;
  const std::string manifest_path = dir + "/" + kManifestName;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return NotFound("dataset " + dir + ": no such directory");
  }
  auto text = ReadFileToString(manifest_path);
  if (!text.ok()) {
    return NotFound("dataset " + dir + ": cannot read " + kManifestName +
                    " (not a sluice dataset?): " + text.status().message());
  }
  SLUICE_ASSIGN_OR_RETURN(ds.manifest_, ParseManifest(text.value(), manifest_path));
  SLUICE_RETURN_IF_ERROR(ds.CheckFiles());
  SLUICE_RETURN_IF_ERROR(ds.CheckPartitions());
  SLUICE_RETURN_IF_ERROR(ds.CheckBuckets());
  SLUICE_RETURN_IF_ERROR(ds.CheckRecordedRanges());
  return ds;
}

Result<const DatasetFile*> Dataset::File(const std::string& role) const {
  auto it = manifest_.files.find(role);
  if (it == manifest_.files.end()) {
    return NotFound("dataset " + dir_ + " has no '" + role + "' file");
  }
  return &it->second;
}

Status Dataset::CheckFiles() const {
  for (const auto& [role, f] : manifest_.files) {
    const uint64_t expected = f.elements() * DTypeBytes(f.dtype, manifest_.record);
    if (f.bytes != expected) {
      return Corruption("dataset " + dir_ + ": files." + role + " says " +
                        std::to_string(f.bytes) + " bytes but its shape and dtype (" +
                        DTypeName(f.dtype) + ") make " + std::to_string(expected));
    }
    struct stat st {};
    const std::string path = PathOf(f);
    if (::stat(path.c_str(), &st) != 0) {
      return ErrnoStatus("dataset " + dir_ + ": file " + f.path + " (" + role + ")", errno);
    }
    if (static_cast<uint64_t>(st.st_size) != f.bytes) {
      return Corruption("dataset " + dir_ + ": file " + f.path + " is " +
                        std::to_string(st.st_size) + " bytes, the manifest says " +
                        std::to_string(f.bytes) +
                        (static_cast<uint64_t>(st.st_size) < f.bytes ? " (truncated)" : ""));
    }
  }
  return Status::Ok();
}

Status Dataset::CheckPartitions() const {
  const auto& b = manifest_.partition_bounds;
  if (manifest_.task == TaskKind::kRecommendation) return Status::Ok();
  const std::string where = "dataset " + dir_ + ": partitions.bounds";
  if (b.size() < 2) return Corruption(where + " needs at least 2 entries");
  if (b.front() != 0 || b.back() != manifest_.num_nodes) {
    return Corruption(where + " must run from 0 to counts.nodes (" +
                      std::to_string(manifest_.num_nodes) + ")");
  }
  for (size_t k = 1; k < b.size(); ++k) {
    if (b[k] < b[k - 1]) return Corruption(where + " decreases at index " + std::to_string(k));
  }
  return Status::Ok();
}

Status Dataset::CheckBuckets() const {
  const uint64_t p = manifest_.num_partitions();
  for (const auto& [role, f] : manifest_.files) {
    const std::string suffix = ".buckets";
    if (role.rfind("edges.", 0) != 0 || role.size() < suffix.size() || role.compare(role.size() - suffix.size(), suffix.size(),
                                                    suffix) != 0) {
      continue;
    }
    const std::string where = "dataset " + dir_ + ": " + role;
    if (f.elements() != p * p + 1) {
      return Corruption(where + " has " + std::to_string(f.elements()) + " offsets; " +
                        std::to_string(p) + " partitions need " + std::to_string(p * p + 1));
    }
    // edges.<split>[.by_dst].buckets -> the split's edge count
    const std::string split = role.substr(6, role.find('.', 6) - 6);
    auto count = manifest_.edges.find(split);
    if (count == manifest_.edges.end()) {
      return Corruption(where + ": counts.edges has no '" + split + "' entry");
    }
    SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ReadInt64(role));
    for (size_t k = 0; k < offsets.size(); ++k) {
      const bool ok = k == 0 ? offsets[0] == 0 : offsets[k] >= offsets[k - 1];
      if (!ok) return Corruption(where + ": offset " + std::to_string(k) + " is out of order");
    }
    if (static_cast<uint64_t>(offsets.back()) != count->second) {
      return Corruption(where + ": the last offset is " + std::to_string(offsets.back()) +
                        " but the split has " + std::to_string(count->second) + " edges");
    }
  }
  return Status::Ok();
}

std::optional<IdBounds> BoundsOf(const Manifest& m, const std::string& role) {
  const auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return role.size() >= s.size() && role.compare(role.size() - s.size(), s.size(), s) == 0;
  };
  const auto nodes = IdBounds{0, static_cast<int64_t>(m.num_nodes), "counts.nodes"};
  if (role.rfind("edges.", 0) == 0) {
    if (ends_with(".src") || ends_with(".dst")) return nodes;
    if (ends_with(".rel")) return IdBounds{0, static_cast<int64_t>(m.num_relations), "counts.relations"};
    return std::nullopt;
  }
  for (const char* split : kSplits) {
    if (role == std::string("nodes.") + split) return nodes;
  }
  if (role == "nodes.labels") return IdBounds{-1, static_cast<int64_t>(m.num_classes), "counts.classes"};
  return std::nullopt;
}

namespace {

std::string RangeText(int64_t lo, int64_t hi, bool closed) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + (closed ? "]" : ")");
}

}  // namespace

// A recorded range must lie within the role's bounds: a cheap check of the manifest against
// itself (Verify checks the values).
Status Dataset::CheckRecordedRanges() const {
  for (const auto& [role, f] : manifest_.files) {
    if (!f.range) continue;
    std::optional<IdBounds> b = BoundsOf(manifest_, role);
    if (b && (f.range->first < b->lo || f.range->second >= b->hi)) {
      return Corruption("dataset " + dir_ + ": files." + role + ".range " +
                        RangeText(f.range->first, f.range->second, true) + " is outside " +
                        RangeText(b->lo, b->hi, false) + " (" + b->field + ")");
    }
  }
  return Status::Ok();
}

Result<std::vector<int64_t>> Dataset::ReadInt64(const std::string& role) const {
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* f, File(role));
  if (f->dtype != DType::kInt64 && f->dtype != DType::kInt32) {
    return InvalidArgument("dataset " + dir_ + ": " + role + " is " + DTypeName(f->dtype) +
                           ", expected int32 or int64");
  }
  std::vector<int64_t> values(f->elements());
  SLUICE_ASSIGN_OR_RETURN(sluice::File file, sluice::File::Open(PathOf(*f), OpenMode::kRead, false));
  SLUICE_RETURN_IF_ERROR(
      PreadFull(file, reinterpret_cast<std::byte*>(values.data()), f->bytes, 0));
  if (f->dtype == DType::kInt32) {  // widen in place, from the back
    const int32_t* narrow = reinterpret_cast<const int32_t*>(values.data());
    for (size_t i = values.size(); i-- > 0;) values[i] = narrow[i];
  }
  return values;
}

// Reads `bytes` of `path` in 1 MiB chunks and calls visit(index, element) for every element of
// `width` bytes, stopping at the first error it returns.
template <class Visit>
Status ForEachElement(const std::string& path, uint64_t bytes, uint32_t width, Visit visit) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return IoError(path + ": cannot open for reading");
  std::vector<std::byte> chunk(1 << 20);  // a multiple of every element width
  for (uint64_t offset = 0; offset < bytes; offset += chunk.size()) {
    const uint64_t n = std::min<uint64_t>(chunk.size(), bytes - offset);
    if (std::fread(chunk.data(), 1, n, file.get()) != n) return IoError(path + ": short read");
    for (uint64_t i = 0; i < n / width; ++i) {
      SLUICE_RETURN_IF_ERROR(visit(offset / width + i, chunk.data() + i * width));
    }
  }
  return Status::Ok();
}

// Every value of a float32 or float16 array is finite; else the first bad row and column.
Status CheckFinite(const std::string& path, const DatasetFile& f) {
  const uint32_t width = f.dtype == DType::kFloat32 ? 4 : 2;
  const uint64_t cols = f.shape.size() > 1 ? f.shape[1] : 1;
  return ForEachElement(path, f.bytes, width, [&](uint64_t k, const std::byte* e) -> Status {
    bool finite;
    if (width == 4) {
      uint32_t bits;
      std::memcpy(&bits, e, 4);
      finite = (bits & 0x7F800000u) != 0x7F800000u;
    } else {
      uint16_t bits;
      std::memcpy(&bits, e, 2);
      finite = (bits & 0x7C00u) != 0x7C00u;
    }
    if (finite) return Status::Ok();
    return Corruption(path + ": row " + std::to_string(k / cols) + ", column " + std::to_string(k % cols) +
                      " is not finite (nan or infinite)");
  });
}

// Every value of an int32 or int64 array within `b` (when given) and, when the manifest records
// a range, the array's smallest and largest values equal to it.
Status CheckIds(const std::string& path, const std::string& role, const DatasetFile& f,
                const std::optional<IdBounds>& b) {
  const uint32_t width = f.dtype == DType::kInt64 ? 8 : 4;
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  SLUICE_RETURN_IF_ERROR(ForEachElement(path, f.bytes, width, [&](uint64_t k, const std::byte* e) -> Status {
    int64_t v;
    if (width == 8) {
      std::memcpy(&v, e, 8);
    } else {
      int32_t narrow;
      std::memcpy(&narrow, e, 4);
      v = narrow;
    }
    if (b && (v < b->lo || v >= b->hi)) {
      return Corruption(path + " (" + role + "): value " + std::to_string(v) + " at index " + std::to_string(k) +
                        " is outside " + RangeText(b->lo, b->hi, false) + " (" + b->field + ")");
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    return Status::Ok();
  }));
  if (f.range && f.bytes > 0 && (lo != f.range->first || hi != f.range->second)) {
    return Corruption(path + " (" + role + "): holds " + RangeText(lo, hi, true) +
                      " but the manifest records range " + RangeText(f.range->first, f.range->second, true));
  }
  return Status::Ok();
}

Result<Dataset::VerifyReport> Dataset::Verify() const {
  VerifyReport report;
  for (const auto& [role, f] : manifest_.files) {
    if (!f.crc32) return Corruption("dataset " + dir_ + ": " + role + " has no checksum");
    SLUICE_ASSIGN_OR_RETURN(FileDigest digest, DigestFile(PathOf(f)));
    if (digest.crc32 != *f.crc32) {
      char text[96];
      std::snprintf(text, sizeof(text), ": checksum mismatch (crc32 %08x, manifest %08x)",
                    digest.crc32, *f.crc32);
      return Corruption("dataset " + dir_ + ": file " + f.path + text);
    }
    ++report.files;
    if (f.dtype == DType::kFloat32 || f.dtype == DType::kFloat16) {
      SLUICE_RETURN_IF_ERROR(CheckFinite(PathOf(f), f));
      ++report.float_arrays;
    }
    const std::optional<IdBounds> bounds = BoundsOf(manifest_, role);
    if ((f.dtype == DType::kInt32 || f.dtype == DType::kInt64) && (bounds || f.range)) {
      SLUICE_RETURN_IF_ERROR(CheckIds(PathOf(f), role, f, bounds));
      if (bounds) ++report.id_arrays;
    }
  }
  return report;
}

std::string Dataset::Summary() const {
  const Manifest& m = manifest_;
  std::ostringstream out;
  uint64_t total = 0;
  for (const auto& [role, f] : m.files) total += f.bytes;
  out << "dataset " << dir_ << "\n"
      << "  name: " << m.name << "\n  task: " << TaskKindName(m.task)
      << "\n  format version: " << m.format_version << "\n";
  if (m.task != TaskKind::kRecommendation) {
    out << "  nodes: " << m.num_nodes << "\n  relations: " << m.num_relations
        << "\n  partitions: " << m.num_partitions() << "\n";
  }
  for (const char* split : kSplits) {
    if (m.edges.count(split)) out << "  edges." << split << ": " << m.edges.at(split) << "\n";
    if (m.samples.count(split)) {
      out << "  samples." << split << ": " << m.samples.at(split) << "\n";
    }
  }
  if (m.feature_dim) out << "  feature dim: " << m.feature_dim << "\n";
  if (m.num_classes) out << "  classes: " << m.num_classes << "\n";
  if (m.task == TaskKind::kRecommendation) {
    out << "  record: " << m.record.sparse << " sparse, " << m.record.dense << " dense, "
        << m.record.bytes() << " bytes\n";
  }
  out << "  files: " << m.files.size() << " (" << FormatBytes(total) << ")\n";
  for (const auto& [role, f] : m.files) {
    out << "    " << role << ": " << f.path << " " << DTypeName(f.dtype) << " [";
    for (size_t i = 0; i < f.shape.size(); ++i) out << (i ? ", " : "") << f.shape[i];
    out << "] " << FormatBytes(f.bytes) << "\n";
  }
  out << "  stats: " << m.stats_json << "\n";
  return out.str();
}

Result<DatasetWriter> DatasetWriter::Begin(const std::string& dir, Manifest manifest) {
  const std::string temp = dir + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(temp, ec);
  fs::create_directories(temp, ec);
  if (ec) return IoError("create " + temp + ": " + ec.message());
  return DatasetWriter(dir, temp, std::move(manifest));
}

DatasetWriter::DatasetWriter(DatasetWriter&& other) noexcept
    : dir_(std::move(other.dir_)),
      temp_dir_(std::move(other.temp_dir_)),
      manifest_(std::move(other.manifest_)),
      committed_(other.committed_) {
  other.committed_ = true;  // the moved-from writer owns nothing to clean up
}

DatasetWriter::~DatasetWriter() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_dir_, ec);
}

Status DatasetWriter::AddArray(const std::string& role, const std::string& path, DType dtype,
                               std::vector<uint64_t> shape, std::span<const std::byte> bytes) {
  DatasetFile f;
  f.role = role;
  f.path = path;
  f.dtype = dtype;
  f.shape = std::move(shape);
  f.bytes = bytes.size();
  if (f.elements() * DTypeBytes(dtype, manifest_.record) != f.bytes) {
    return InvalidArgument("dataset array " + role + ": " + std::to_string(f.bytes) +
                           " bytes do not match its shape and dtype");
  }
  const fs::path full = fs::path(temp_dir_) / path;
  std::error_code ec;
  fs::create_directories(full.parent_path(), ec);
  if (ec) return IoError("create " + full.parent_path().string() + ": " + ec.message());
  SLUICE_ASSIGN_OR_RETURN(FileDigest digest, WriteFileDurable(full.string(), bytes));
  f.crc32 = digest.crc32;
  manifest_.files[role] = std::move(f);
  return Status::Ok();
}

Status DatasetWriter::Commit() {
  SLUICE_CHECK(!committed_, "DatasetWriter committed twice");
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(temp_dir_ + "/" + kManifestName, manifest_.ToJson()));
  auto check = Dataset::Open(temp_dir_);
  if (!check.ok()) return check.status().WithContext("refusing to commit " + dir_);
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::rename(temp_dir_, dir_, ec);
  if (ec) return IoError("rename " + temp_dir_ + " to " + dir_ + ": " + ec.message());
  committed_ = true;
  return SyncDirectory(fs::path(dir_).parent_path().empty()
                           ? "."
                           : fs::path(dir_).parent_path().string());
}

}  // namespace sluice
