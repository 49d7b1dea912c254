#pragma once
// The resume rule, one for every task: a checkpoint may be resumed by a run whose config
// fingerprint and dataset fingerprint equal the ones the checkpoint recorded.
//
// The config fingerprint covers what changes the training trajectory: `task`, every `model.*`
// and `features.*` key and every `train.*` key except `train.epochs` and `train.max_minutes`
// (a run may be given more epochs or time). It leaves out where and how the run executes:
// `dataset` (the dataset is fingerprinted by its manifest instead, so a moved dataset still
// resumes), `run_dir`, `progress`, `checkpoint_every`, `checkpoint_incremental`,
// `eval.*`, `storage.*`, `io.*` and `threads.*`. A resume with other `threads.*` is accepted
// with a warning: bitwise equality with an uninterrupted run no longer holds (see the runner).
//
// Both fingerprints are zlib CRC-32s, as 8 hex digits.

#include <string>
#include <string_view>

#include "common/config.h"
#include "common/status.h"

namespace sluice {

// Whether the key at `path` ("train.lr") is part of the config fingerprint.
bool InConfigFingerprint(std::string_view path);

// Whether `path: value` is a key added after checkpoints began to be fingerprinted, at the value
// that trains exactly as the versions without it did (train.lr_decay 1, model.encoder none, ...):
// such lines are left out of the fingerprint, so those versions' checkpoints still resume and
// evaluate. A key added later joins this list with its neutral default.
bool NeutralLaterKey(std::string_view path, std::string_view value);

// CRC-32 of `text`, as 8 hex digits.
std::string Crc32Hex(std::string_view text);

// The fingerprinted keys of a config's YAML (as Task::ConfigYaml prints it), one "path: value"
// line each, in the YAML's order: what ranks of one run must agree on (train/dist.h).
std::string FingerprintLines(const std::string& config_yaml);

// The fingerprint of a manifest file's bytes.
Result<std::string> DatasetFingerprint(const std::string& dataset_dir);

// Renders the fingerprinted keys of a config, one "path: value" line each.
class FingerprintVisitor {
 public:
  explicit FingerprintVisitor(std::string prefix = "") : prefix_(std::move(prefix)) {}
  template <typename T, typename Check = NoCheck>
  void Field(const char* name, T& value, const char* /*doc*/, Check = {}) {
    const std::string path = prefix_ + name;
    if (!InConfigFingerprint(path)) return;
    const std::string text = FormatValue(value);
    if (!NeutralLaterKey(path, text)) text_ += path + ": " + text + "\n";
  }
  template <typename S>
  void Section(const char* name, S& section, const char* /*doc*/) {
    FingerprintVisitor inner(prefix_ + name + ".");
    section.VisitFields(inner);
    text_ += inner.text_;
  }
  const std::string& text() const { return text_; }

 private:
  std::string prefix_;
  std::string text_;
};

template <typename Config>
std::string ConfigFingerprint(Config& config) {
  FingerprintVisitor v;
  config.VisitFields(v);
  return Crc32Hex(v.text());
}

}  // namespace sluice
