#include "train/fingerprint.h"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "storage/dataset.h"
#include "storage/file.h"

namespace sluice {

bool InConfigFingerprint(std::string_view path) {
  if (path == "task") return true;
  if (path.starts_with("model.") || path.starts_with("features.")) return true;
  return path.starts_with("train.") && path != "train.epochs" && path != "train.max_minutes";
}

bool NeutralLaterKey(std::string_view path, std::string_view value) {
  static constexpr std::pair<std::string_view, std::string_view> kNeutral[] = {
      {"train.lr_decay", "1"}, {"train.lr_decay_patience", "1"}, {"train.lr_decay_restore", "false"},
      {"model.encoder", "none"}, {"model.fanout", "10"},
      {"train.virtual_shards", "0"}, {"model.candidate_dropout", "0"},
      {"train.relation_prediction", "0"}, {"train.own_negative", "false"},
      {"model.relation_init_scale", "0"}};
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {  // a name, as printed
    value = value.substr(1, value.size() - 2);
  }
  for (const auto& [p, v] : kNeutral) {
    if (p == path && v == value) return true;
  }
  return false;
}

std::string Crc32Hex(std::string_view text) {
  char out[9];
  std::snprintf(out, sizeof out, "%08x", Crc32(0, text.data(), text.size()));
  return out;
}

namespace {

// A scalar as typed (a number in its shortest exact form: 0.05, not 0.050000000000000003); a
// list or map in YAML's flow style.
std::string ShortValue(const YAML::Node& n) {
  if (n.IsScalar()) {
    const std::string text = n.Scalar();
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (!text.empty() && *end == '\0' && text.find_first_of("eE.") != std::string::npos) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.15g", v);
      if (std::strtod(buf, nullptr) == v) return buf;
    }
    return text;
  }
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}

}  // namespace

std::string FingerprintLines(const std::string& config_yaml) {
  std::string out;
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& n,
                                                                         const std::string& path) {
    if (n.IsMap()) {
      for (const auto& kv : n) {
        const std::string key = kv.first.as<std::string>();
        walk(kv.second, path.empty() ? key : path + "." + key);
      }
    } else if (InConfigFingerprint(path) && !NeutralLaterKey(path, ShortValue(n))) {
      out += path + ": " + ShortValue(n) + "\n";
    }
  };
  try {
    walk(YAML::Load(config_yaml), "");
  } catch (const YAML::Exception& e) {
    out += std::string("unreadable config: ") + e.what() + "\n";
  }
  return out;
}

Result<std::string> DatasetFingerprint(const std::string& dataset_dir) {
  SLUICE_ASSIGN_OR_RETURN(std::string manifest,
                          ReadFileToString(dataset_dir + "/" + kManifestName));
  return Crc32Hex(manifest);
}

}  // namespace sluice
