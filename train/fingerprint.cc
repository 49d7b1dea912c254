#include "train/fingerprint.h"

#include <cstdio>

#include "storage/dataset.h"
#include "storage/file.h"

namespace sluice {

bool InConfigFingerprint(std::string_view path) {
  if (path == "task") return true;
  if (path.starts_with("model.") || path.starts_with("features.")) return true;
  return path.starts_with("train.") && path != "train.epochs" && path != "train.max_minutes";
}

std::string Crc32Hex(std::string_view text) {
  char out[9];
  std::snprintf(out, sizeof out, "%08x", Crc32(0, text.data(), text.size()));
  return out;
}

Result<std::string> DatasetFingerprint(const std::string& dataset_dir) {
  SLUICE_ASSIGN_OR_RETURN(std::string manifest,
                          ReadFileToString(dataset_dir + "/" + kManifestName));
  return Crc32Hex(manifest);
}

}  // namespace sluice
