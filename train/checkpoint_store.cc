#include "train/checkpoint_store.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <tuple>

#include "common/crash_point.h"
#include "common/json.h"
#include "storage/file.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// (epoch, step) of a checkpoint name, or nothing for other names.
std::optional<std::pair<uint64_t, uint64_t>> ParseName(const std::string& name) {
  unsigned long long epoch = 0, step = 0;
  int end = 0;
  if (std::sscanf(name.c_str(), "epoch-%llu-step-%llu%n", &epoch, &step, &end) != 2 ||
      static_cast<size_t>(end) != name.size()) {
    return std::nullopt;
  }
  return std::make_pair(uint64_t{epoch}, uint64_t{step});
}

std::optional<std::string> ReadName(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return std::nullopt;
  std::string name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty()) return std::nullopt;
  return name;
}

Result<CheckpointState> ParseYaml(const YAML::Node& root) {
  CheckpointState s;
  if (!root.IsMap() || !root["format"]) {
    return FailedPrecondition("a checkpoint of an older format (version 1, written before file "
                              "checksums); this sluice reads version " +
                              std::to_string(kCheckpointFormat) +
                              ": train again with --overwrite, or use the sluice that wrote it");
  }
  s.format = root["format"].as<int>();
  if (s.format != kCheckpointFormat) {
    return FailedPrecondition("a checkpoint of format version " + std::to_string(s.format) +
                              "; this sluice reads version " + std::to_string(kCheckpointFormat));
  }
  s.task = root["task"].as<std::string>();
  s.epoch = root["epoch"].as<uint64_t>();
  s.step = root["step"].as<uint64_t>();
  s.seed = root["seed"].as<uint64_t>();
  s.config_fingerprint = root["config"].as<std::string>();
  s.dataset_fingerprint = root["dataset"].as<std::string>();
  for (const auto& kv : root["conditions"]) {
    const std::string key = kv.first.as<std::string>();
    if (!IsPlainKey(key)) return Corruption("conditions: a key that is not a condition's name");
    s.conditions[key] = kv.second.as<std::string>();
  }
  const YAML::Node best = root["best_score"];
  s.best_score = best.IsNull() ? std::numeric_limits<double>::quiet_NaN() : best.as<double>();
  s.best_checkpoint = root["best_checkpoint"].as<std::string>();
  s.since_best = root["since_best"].as<uint32_t>();
  // Absent in checkpoints written before train.lr_decay: no decay yet.
  if (const YAML::Node scale = root["lr_scale"]) s.lr_scale = scale.as<double>();
  if (const YAML::Node since = root["since_decay"]) s.since_decay = since.as<uint32_t>();
  if (!(s.lr_scale > 0 && s.lr_scale <= 1)) {
    return Corruption("lr_scale: " + std::to_string(s.lr_scale) + " is not in (0, 1]");
  }
  for (const auto& f : root["files"]) {
    CheckpointFile file;
    file.path = f["path"].as<std::string>();
    file.bytes = f["bytes"].as<uint64_t>();
    const std::string crc = f["crc32"].as<std::string>();
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(crc.c_str(), &end, 16);
    if (crc.empty() || *end != '\0' || errno != 0 || value > 0xffffffffULL) {
      return Corruption("files: bad crc32 '" + crc + "' for " + file.path);
    }
    file.crc32 = static_cast<uint32_t>(value);
    if (file.path.empty() || file.path[0] == '/' || file.path.find("..") != std::string::npos) {
      return Corruption("files: '" + file.path + "' is not a path inside the checkpoint");
    }
    s.files.push_back(std::move(file));
  }
  return s;
}

}  // namespace

std::string CheckpointName(uint64_t epoch, uint64_t step) {
  return "epoch-" + std::to_string(epoch) + "-step-" + std::to_string(step);
}

std::string CheckpointState::ToJson() const {
  JsonObject conds, root;
  for (const auto& [k, v] : conditions) conds.Add(k, v);
  std::string list = "[";
  for (size_t i = 0; i < files.size(); ++i) {
    JsonObject f;
    f.Add("path", files[i].path).Add("bytes", files[i].bytes).Add("crc32", Hex32(files[i].crc32));
    list += (i ? ",\n    " : "\n    ") + f.str();
  }
  list += files.empty() ? "]" : "\n  ]";
  root.Add("format", format).Add("task", task).Add("epoch", epoch).Add("step", step);
  root.Add("seed", seed).Add("config", config_fingerprint).Add("dataset", dataset_fingerprint);
  root.AddRaw("conditions", conds.str()).Add("best_score", best_score);
  root.Add("best_checkpoint", best_checkpoint).Add("since_best", since_best);
  root.Add("lr_scale", lr_scale).Add("since_decay", since_decay);
  root.AddRaw("files", list);
  return root.str() + "\n";
}

Result<CheckpointState> CheckpointState::Parse(const std::string& text, const std::string& where) {
  if (std::string why = Utf8Problem(text, where); !why.empty()) return Corruption(why);
  try {
    Result<CheckpointState> s = ParseYaml(YAML::Load(text));
    if (!s.ok()) return s.status().WithContext(where);
    // yaml-cpp turns a \xNN escape into a raw byte: strings must still be UTF-8 to be written back.
    if (std::string why = Utf8Problem(s->ToJson(), where + " (after its escapes)"); !why.empty()) {
      return Corruption(why);
    }
    return s;
  } catch (const YAML::Exception& e) {
    return Corruption(where + ": unreadable checkpoint state (" + e.msg + ")");
  }
}

Status CheckpointWriter::WriteBytes(const std::string& name, std::span<const std::byte> bytes) {
  SLUICE_ASSIGN_OR_RETURN(FileDigest d, WriteFileDurable(PathOf(name), bytes));
  files_.push_back({name, d.bytes, d.crc32});
  return Status::Ok();
}

Status CheckpointWriter::WriteString(const std::string& name, const std::string& text) {
  return WriteBytes(name, std::span<const std::byte>(
                              reinterpret_cast<const std::byte*>(text.data()), text.size()));
}

Status CheckpointWriter::CopyIn(const std::string& source, const std::string& name, DirtyPages* dirty) {
  if (dirty == nullptr || inc_ == nullptr) {
    Result<FileDigest> d = CopyFileDurable(source, PathOf(name));
    if (!d.ok()) return d.status().WithContext("checkpoint: copy " + source);
    files_.push_back({name, d->bytes, d->crc32});
    return Status::Ok();
  }
  Result<ChunkedDigest> d = CopyTable(source, name, *dirty);
  if (!d.ok()) return d.status().WithContext("checkpoint: copy " + source);
  files_.push_back({name, d->bytes, d->Whole()});
  return Status::Ok();
}

Result<ChunkedDigest> CheckpointWriter::CopyTable(const std::string& source, const std::string& name,
                                                  DirtyPages& dirty) {
  CopyHistory& h = (*inc_->histories)[name];
  if (h.map_id != dirty.id()) h = CopyHistory{dirty.id(), {}};
  // The record goes in before the copy: should the copy fail, the pages it took stay counted.
  h.records.push_back({inc_->checkpoint, dirty.Take(), std::nullopt});
  constexpr size_t kKept = 8;  // older copies are never the candidate again
  if (h.records.size() > kKept) h.records.erase(h.records.begin());
  CheckpointCopyStats& stats = *inc_->stats;
  stats.table_bytes += dirty.file_bytes();
  std::optional<ChunkedDigest> done;
  if (inc_->enabled && !inc_->candidate.empty()) {
    std::vector<uint64_t> since = h.records.back().dirty;
    for (size_t i = h.records.size() - 1; i-- > 0;) {
      const CopyHistory::Record& r = h.records[i];
      if (r.checkpoint == inc_->candidate && r.digest) {
        done = Recycle(source, name, *r.digest, since);
        break;
      }
      OrInto(since, r.dirty);
    }
  }
  if (!done) {
    SLUICE_ASSIGN_OR_RETURN(ChunkedDigest d, CopyFileChunked(source, PathOf(name)));
    ++stats.full, stats.bytes_written += d.bytes;
    done = std::move(d);
  }
  h.records.back().digest = done;
  return *done;
}

std::optional<ChunkedDigest> CheckpointWriter::Recycle(const std::string& source, const std::string& name,
                                                       const ChunkedDigest& base,
                                                       const std::vector<uint64_t>& since) {
  Result<std::string> retired = Retire();
  if (!retired.ok()) return std::nullopt;
  std::error_code ec;
  fs::rename(*retired + "/" + name, PathOf(name), ec);
  if (ec) return std::nullopt;
  uint64_t written = 0;
  Result<ChunkedDigest> d = PatchFile(source, PathOf(name), base, since, written);
  if (!d.ok()) return std::nullopt;  // the full copy that follows overwrites it
  ++inc_->stats->incremental, inc_->stats->bytes_written += written;
  return *std::move(d);
}

Result<std::string> CheckpointWriter::Retire() {
  if (!inc_->retired.empty()) return inc_->retired;
  const std::string from = inc_->store_dir + "/" + inc_->candidate, to = from + ".retired.tmp";
  std::error_code ec;
  fs::remove_all(to, ec);
  fs::rename(from, to, ec);
  if (ec) return IoError("rename " + from + " to " + to + ": " + ec.message());
  SLUICE_RETURN_IF_ERROR(SyncDirectory(inc_->store_dir));
  inc_->retired = to;
  return to;
}

Status CheckpointWriter::Record(const std::string& name) {
  const fs::path root = PathOf(name);
  std::vector<std::string> found;
  std::error_code ec;
  if (fs::is_directory(root, ec)) {
    for (const auto& e : fs::recursive_directory_iterator(root, ec)) {
      if (e.is_regular_file()) found.push_back(fs::relative(e.path(), dir_).string());
    }
    std::sort(found.begin(), found.end());
  } else if (fs::is_regular_file(root, ec)) {
    found.push_back(name);
  }
  if (ec || found.empty()) return NotFound("checkpoint: nothing written at " + root.string());
  for (const std::string& rel : found) {
    SLUICE_ASSIGN_OR_RETURN(FileDigest d, DigestFile(PathOf(rel)));
    SLUICE_ASSIGN_OR_RETURN(File f, File::Open(PathOf(rel), OpenMode::kRead, false));
    SLUICE_RETURN_IF_ERROR(f.Sync());
    files_.push_back({rel, d.bytes, d.crc32});
  }
  if (fs::is_directory(root)) SLUICE_RETURN_IF_ERROR(SyncDirectory(root.string()));
  return Status::Ok();
}

Status CheckpointWriter::Adopt(const std::string& name, uint64_t bytes, uint32_t crc32) {
  std::error_code ec;
  const uint64_t size = fs::file_size(PathOf(name), ec);
  if (ec) return NotFound("checkpoint: " + PathOf(name) + ": " + ec.message());
  if (size != bytes) {
    return Corruption("checkpoint: " + PathOf(name) + " holds " + std::to_string(size) +
                      " bytes, but its writer reported " + std::to_string(bytes));
  }
  files_.push_back({name, bytes, crc32});
  return Status::Ok();
}

bool CheckpointReader::Has(const std::string& name) const {
  for (const CheckpointFile& f : state_.files) {
    if (f.path == name || f.path.rfind(name + "/", 0) == 0) return true;
  }
  return false;
}

Result<std::string> CheckpointReader::PathOf(const std::string& name) const {
  if (!Has(name)) return NotFound(dir_ + ": the checkpoint holds no " + name);
  return dir_ + "/" + name;
}

CheckpointStore::CheckpointStore(std::string run_dir) : dir_(std::move(run_dir) + "/checkpoints") {}

std::vector<std::string> CheckpointStore::List() const {
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    auto es = ParseName(name);
    if (!es || !fs::exists(e.path() / "state.json")) continue;
    found.emplace_back(es->first, es->second, name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (auto& f : found) names.push_back(std::get<2>(f));
  return names;
}

Result<std::string> CheckpointStore::Latest() const {
  if (auto name = ReadName(dir_ + "/latest"); name && fs::exists(dir_ + "/" + *name + "/state.json")) {
    return *name;
  }
  std::vector<std::string> all = List();
  if (all.empty()) {
    const std::string stray = StrayEntry();
    return NotFound("no checkpoint in " + dir_ +
                    (stray.empty() ? "" : " (" + stray + " has no state.json: an unfinished or damaged one)"));
  }
  return all.back();
}

std::optional<std::string> CheckpointStore::Best() const {
  auto name = ReadName(dir_ + "/best");
  if (name && fs::exists(dir_ + "/" + *name + "/state.json")) return name;
  return std::nullopt;
}

Result<std::string> CheckpointStore::Resolve(const std::string& which) const {
  if (which == "latest") return Latest();
  if (which == "best" || which == "default") {
    if (auto best = Best()) return *best;
    if (which == "default") return Latest();
    if (auto named = ReadName(dir_ + "/best")) {
      return NotFound(dir_ + "/best names " + *named + ", which is not a complete checkpoint there");
    }
    return NotFound("no best checkpoint in " + dir_ + " (validation never ran: eval.every 0?)");
  }
  if (!fs::exists(dir_ + "/" + which + "/state.json")) {
    std::string have;
    for (const std::string& n : List()) have += (have.empty() ? "" : ", ") + n;
    return NotFound("no checkpoint '" + which + "' in " + dir_ + " (it has: " +
                    (have.empty() ? "none" : have) + ")");
  }
  return which;
}

Status CheckpointStore::Verify(const std::string& dir, const CheckpointState& state) const {
  for (const CheckpointFile& f : state.files) {
    const std::string path = dir + "/" + f.path;
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) return NotFound(path + ": missing from the checkpoint (" + ec.message() + ")");
    if (size != f.bytes) {
      return Corruption(path + ": size does not match the model: the checkpoint recorded " +
                        std::to_string(f.bytes) + " bytes, the file has " +
                        std::to_string(size) + " (truncated or damaged)");
    }
    SLUICE_ASSIGN_OR_RETURN(FileDigest d, DigestFile(path));
    if (d.crc32 != f.crc32) {
      return Corruption(path + ": checksum mismatch (crc32 " + Hex32(d.crc32) +
                        ", the checkpoint recorded " + Hex32(f.crc32) +
                        "): the file is damaged; use another checkpoint (--checkpoint NAME)");
    }
  }
  return Status::Ok();
}

Result<CheckpointReader> CheckpointStore::Open(const std::string& name) const {
  const std::string dir = dir_ + "/" + name;
  const std::string state_path = dir + "/state.json";
  Result<std::string> text = ReadFileToString(state_path);
  if (!text.ok()) return text.status().WithContext("checkpoint " + dir);
  SLUICE_ASSIGN_OR_RETURN(CheckpointState state, CheckpointState::Parse(*text, state_path));
  SLUICE_RETURN_IF_ERROR(Verify(dir, state));
  return CheckpointReader(name, dir, std::move(state));
}

Status CheckpointStore::WriteTemporary(CheckpointWriter& writer, CheckpointState& state,
                                       const std::function<Status(CheckpointWriter&)>& write_files) {
  const std::string& temp = writer.dir();
  SLUICE_RETURN_IF_ERROR(write_files(writer));
  CrashPoint("checkpoint");
  state.files = writer.files();
  const std::string json = state.ToJson();
  SLUICE_RETURN_IF_ERROR(WriteFileDurable(temp + "/state.json",
                                          std::span<const std::byte>(
                                              reinterpret_cast<const std::byte*>(json.data()),
                                              json.size()))
                             .status());
  return SyncDirectory(temp);
}

Status CheckpointStore::Write(const std::string& name, CheckpointState state,
                              const std::function<Status(CheckpointWriter&)>& write_files,
                              bool mark_best) {
  const std::string final_dir = dir_ + "/" + name;
  const std::string temp = final_dir + ".tmp";
  std::error_code ec;
  fs::remove_all(temp, ec);
  fs::create_directories(temp, ec);
  if (ec) return IoError("checkpoint: create " + temp + ": " + ec.message());
  IncrementalCopies inc{incremental_, dir_, name, RetireCandidate(name), "", &histories_, &copy_stats_};
  CheckpointWriter writer(temp, &inc);
  // A failed write (a full disk, say) removes its partial copy, so the space comes back and
  // the previous checkpoints stay as they were (but the one it was replacing, once taken).
  if (Status st = WriteTemporary(writer, state, write_files); !st.ok()) {
    fs::remove_all(temp, ec);
    if (!inc.retired.empty()) fs::remove_all(inc.retired, ec);
    return Status(st.code(), st.message() + " (checkpoint " + name + " not written; " +
                                 (inc.retired.empty() ? "the earlier checkpoints are intact)"
                                                      : inc.candidate + ", which it was replacing, is "
                                                        "gone; the others are intact)"));
  }
  CrashPoint("rename");
  fs::remove_all(final_dir, ec);  // the same point written again (a resumed run)
  fs::rename(temp, final_dir, ec);
  if (ec) return IoError("checkpoint: rename " + temp + " to " + final_dir + ": " + ec.message());
  SLUICE_RETURN_IF_ERROR(SyncDirectory(dir_));
  SLUICE_RETURN_IF_ERROR(WriteFileAtomic(dir_ + "/latest", name + "\n"));
  if (mark_best) SLUICE_RETURN_IF_ERROR(WriteFileAtomic(dir_ + "/best", name + "\n"));
  if (!inc.retired.empty()) {
    fs::remove_all(inc.retired, ec);
    if (ec) return IoError("checkpoint: remove " + inc.retired + ": " + ec.message());
  }
  return Retain();
}

std::string CheckpointStore::RetireCandidate(const std::string& name) const {
  const auto key = ParseName(name);
  if (!key) return "";
  std::vector<std::string> all = List();
  std::erase(all, name);
  // After the write, the two newest of all + name are kept.
  const size_t removed = all.size() + 1 >= 2 ? all.size() + 1 - 2 : 0;  // of all + name, oldest first
  const std::optional<std::string> best = Best();
  std::string candidate;
  for (size_t i = 0; i < all.size(); ++i) {
    // all[i]'s place among all + name: i, or i + 1 once past name.
    const size_t place = i + (ParseName(all[i]) > key ? 1 : 0);
    if (place < removed && (!best || *best != all[i])) candidate = all[i];
  }
  return candidate;
}

Status CheckpointStore::Retain() const {
  std::vector<std::string> all = List();
  const std::optional<std::string> best = Best();
  for (size_t i = 0; i + 2 < all.size(); ++i) {
    if (best && all[i] == *best) continue;
    std::error_code ec;
    fs::remove_all(dir_ + "/" + all[i], ec);
    if (ec) return IoError("checkpoint: remove " + dir_ + "/" + all[i] + ": " + ec.message());
  }
  return Status::Ok();
}

Status CheckpointStore::RemoveTemporaries() const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    const bool temp_dir = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
    if (temp_dir || name.find(".tmp-") != std::string::npos) {  // (WriteFileAtomic's)
      fs::remove_all(e.path(), ec);
      if (ec) return IoError("remove " + e.path().string() + ": " + ec.message());
    }
  }
  return Status::Ok();
}

std::string CheckpointStore::StrayEntry() const {
  std::error_code ec;
  std::vector<std::string> stray;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "latest" || name == "best" || name.find(".tmp") != std::string::npos) continue;
    if (!fs::exists(e.path() / "state.json")) stray.push_back(name);
  }
  std::sort(stray.begin(), stray.end());
  return stray.empty() ? std::string() : stray.front();
}

Status CheckpointStore::RemoveAll() const {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (ec) return IoError("remove " + dir_ + ": " + ec.message());
  return Status::Ok();
}

}  // namespace sluice
