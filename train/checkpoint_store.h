#pragma once
// The checkpoint store of a run directory: <run_dir>/checkpoints/<name>/, one directory per
// checkpoint, named epoch-E-step-S (resume at step S of epoch E, both 0-based; step 0 is the
// start of the epoch).
//
// Writing (CheckpointStore::Write): the task's files go into <name>.tmp/ through a
// CheckpointWriter, which fsyncs each file and records its size and CRC-32 (computed while
// writing); then state.json (format version, task, epoch, step, seed, the fingerprints of
// config and dataset, the run's conditions, the best score so far, the file list) is written
// and fsynced, the directory is fsynced and renamed into place, `latest` (and `best`) are
// rewritten atomically, and the retention rule runs: the two newest checkpoints (by epoch,
// step) and `best` are kept, every other one is removed. A crash at any point leaves the
// previous checkpoints intact; a leftover *.tmp is removed by the next trainer.
//
// Incremental table copies (CheckpointWriter::CopyIn with the table's DirtyPages): retention
// is about to remove the oldest checkpoint it does not keep (not the newest, not `best`); when
// this run wrote that checkpoint's copy of the table and tracked every page written since, its
// directory is renamed to <name>.retired.tmp (so it is no longer a checkpoint), its copy moves
// into the new checkpoint and only the pages written since are rewritten, its CRC-32 combined
// from per-chunk CRCs. A crash while that happens loses only the checkpoint being replaced;
// the newest and `best` stay intact. Any other case copies the whole table.
//
// Reading (CheckpointStore::Open): state.json is parsed (an older format is refused in one
// line), and every recorded file is checked for its size and CRC-32 before anything uses it;
// a missing, truncated or damaged file is one line naming it.
//
// Not thread-safe; one trainer owns a run directory (RunDirLock), readers only read.
// torch-free: tasks write libtorch objects through train/torch_io.h.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/dirty_pages.h"

namespace sluice {

// Version 1 (before the training core): no format field, no file checksums.
inline constexpr int kCheckpointFormat = 2;

struct CheckpointFile {
  std::string path;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct CheckpointState {
  int format = kCheckpointFormat;
  std::string task;
  uint64_t epoch = 0, step = 0;
  uint64_t seed = 0;
  std::string config_fingerprint, dataset_fingerprint;  // see train/fingerprint.h
  // Settings outside the fingerprint that still shape the trajectory (the thread plan, ...):
  // a resume with other values is accepted with a warning.
  std::map<std::string, std::string> conditions;
  double best_score = 0;        // NaN: no validation yet
  std::string best_checkpoint;  // the checkpoint holding best_score ("" when none)
  uint32_t since_best = 0;      // validations without a better score (early stopping)
  double lr_scale = 1;          // the learning rates' decay so far (train.lr_decay)
  uint32_t since_decay = 0;     // validations without a better score since the last decay
  std::vector<CheckpointFile> files;

  std::string ToJson() const;
  // `where` names the file in errors.
  static Result<CheckpointState> Parse(const std::string& text, const std::string& where);
};

// "epoch-3-step-0"
std::string CheckpointName(uint64_t epoch, uint64_t step);

// What the store knows about one table's copies in this run's checkpoints.
struct CopyHistory {
  struct Record {
    std::string checkpoint;                // the checkpoint this copy went to
    std::vector<uint64_t> dirty;           // pages written between the previous record and this
    std::optional<ChunkedDigest> digest;   // the copy's, once it is complete
  };
  uint64_t map_id = 0;  // the DirtyPages these records came from
  std::vector<Record> records;  // oldest first
};

// Table copies made by a store's writers.
struct CheckpointCopyStats {
  uint64_t full = 0, incremental = 0;  // copies of each kind
  uint64_t table_bytes = 0;            // the copied tables' sizes, summed
  uint64_t bytes_written = 0;          // bytes written for them
};

// What a store gives a writer for incremental copies.
struct IncrementalCopies {
  bool enabled = true;
  std::string store_dir;
  std::string checkpoint;  // the one being written
  std::string candidate;   // the one retention removes next ("": none); its copies may be reused
  std::string retired;     // the candidate's directory once renamed (<candidate>.retired.tmp)
  std::map<std::string, CopyHistory>* histories = nullptr;  // by file name
  CheckpointCopyStats* stats = nullptr;
};

// Writes one checkpoint's files into its temporary directory.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string dir, IncrementalCopies* incremental = nullptr)
      : dir_(std::move(dir)), inc_(incremental) {}
  // The temporary directory the files go to.
  const std::string& dir() const { return dir_; }
  std::string PathOf(const std::string& name) const { return dir_ + "/" + name; }

  Status WriteBytes(const std::string& name, std::span<const std::byte> bytes);
  Status WriteString(const std::string& name, const std::string& text);
  // Copies the file at `source` in as `name`. With `dirty` (the pages written to `source`; taken
  // here), the copy may be incremental (see the top of this file).
  Status CopyIn(const std::string& source, const std::string& name, DirtyPages* dirty = nullptr);
  // Records what another writer put under PathOf(name) (a file, or a directory whose files are
  // all recorded, e.g. a RocksDB checkpoint): each is read for its CRC-32 and fsynced.
  Status Record(const std::string& name);
  // Records a file another process wrote under PathOf(name) and made durable, with the size and
  // CRC-32 it reported (a rank's shard of a checkpoint's tables: not read again here); the file
  // must be there at that size.
  Status Adopt(const std::string& name, uint64_t bytes, uint32_t crc32);

  const std::vector<CheckpointFile>& files() const { return files_; }

 private:
  // Copies `source` as `name` through the store's history; a full copy when no earlier copy
  // can be brought up to date.
  Result<ChunkedDigest> CopyTable(const std::string& source, const std::string& name, DirtyPages& dirty);
  // Brings the candidate's copy of `name` to `to` up to date with `since`; nullopt when it
  // cannot (then nothing of the candidate was touched, or it is retired and `to` may be stale).
  std::optional<ChunkedDigest> Recycle(const std::string& source, const std::string& name,
                                       const ChunkedDigest& base, const std::vector<uint64_t>& since);
  // Renames the candidate's directory to its retired name (once); its path.
  Result<std::string> Retire();

  std::string dir_;
  IncrementalCopies* inc_;
  std::vector<CheckpointFile> files_;
};

// A verified checkpoint, for reading.
class CheckpointReader {
 public:
  CheckpointReader(std::string name, std::string dir, CheckpointState state)
      : name_(std::move(name)), dir_(std::move(dir)), state_(std::move(state)) {}
  const std::string& name() const { return name_; }
  const std::string& dir() const { return dir_; }
  const CheckpointState& state() const { return state_; }
  // Whether the checkpoint recorded `name` (a file, or a directory recorded with Record).
  bool Has(const std::string& name) const;
  // The path of a recorded file or directory; an error naming the checkpoint when it has none.
  Result<std::string> PathOf(const std::string& name) const;

 private:
  std::string name_, dir_;
  CheckpointState state_;
};

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string run_dir);
  const std::string& dir() const { return dir_; }

  // Complete checkpoints (state.json present), oldest first by (epoch, step).
  std::vector<std::string> List() const;
  bool Empty() const { return List().empty(); }
  // The newest checkpoint (`latest`, or the newest listed when `latest` names none).
  Result<std::string> Latest() const;
  // The best-validating checkpoint, when `best` names one that exists.
  std::optional<std::string> Best() const;
  // "latest", "best" (an error when there is none), "default" (best when it exists, else
  // latest) or a checkpoint's name.
  Result<std::string> Resolve(const std::string& which) const;
  // Opens a checkpoint and verifies every recorded file's size and CRC-32.
  Result<CheckpointReader> Open(const std::string& name) const;

  // Writes checkpoint `name` (state.epoch/step must match it): `write_files` writes the task's
  // files; state.files is filled here. mark_best also points `best` at it. Then retention runs.
  Status Write(const std::string& name, CheckpointState state,
               const std::function<Status(CheckpointWriter&)>& write_files, bool mark_best);
  // false: every table copy is whole (checkpoint_incremental: false).
  void set_incremental(bool on) { incremental_ = on; }
  const CheckpointCopyStats& copy_stats() const { return copy_stats_; }

  // The first entry of the directory that is neither a complete checkpoint, a pointer file
  // (latest, best) nor a temporary; empty when there is none.
  std::string StrayEntry() const;
  // Removes leftovers of interrupted writes (*.tmp directories). Call as the run's owner.
  Status RemoveTemporaries() const;
  // Removes every checkpoint (`sluice train --overwrite`).
  Status RemoveAll() const;

 private:
  // The checkpoint's files and state.json under `temp`, synced.
  static Status WriteTemporary(CheckpointWriter& writer, CheckpointState& state,
                               const std::function<Status(CheckpointWriter&)>& write_files);
  // The checkpoint that retention removes once `name` is written, whichever is best then
  // (not the newest, not the current best); "" when none.
  std::string RetireCandidate(const std::string& name) const;
  Status Retain() const;
  Status Verify(const std::string& dir, const CheckpointState& state) const;

  std::string dir_;  // <run_dir>/checkpoints
  bool incremental_ = true;
  std::map<std::string, CopyHistory> histories_;
  CheckpointCopyStats copy_stats_;
};

}  // namespace sluice
