#pragma once
// Files: a move-only fd with its path (for error messages), the O_DIRECT probe, and atomic
// writes (temporary name, fsync, rename) so nothing is ever left half-written.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace sluice {

// O_DIRECT needs buffers, offsets and lengths aligned to the logical block size; 4096 also
// satisfies 4Kn disks. All sluice io uses this alignment.
inline constexpr uint32_t kDirectAlignBytes = 4096;

enum class OpenMode {
  kRead,       // existing file, read-only
  kReadWrite,  // existing file
  kCreate,     // create or truncate, read-write
};

class File {
 public:
  File() = default;
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Opens `path`. With want_direct, tries O_DIRECT and falls back to buffered io (with one
  // warning per directory) where the filesystem refuses it (tmpfs); direct() says which.
  static Result<File> Open(const std::string& path, OpenMode mode, bool want_direct);

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool direct() const { return direct_; }
  bool valid() const { return fd_ >= 0; }

  Result<uint64_t> SizeBytes() const;
  // Sets the size (ftruncate). Growing does not allocate blocks; use Allocate for that.
  Status Truncate(uint64_t size_bytes);
  // Reserves blocks (fallocate), so a later write cannot fail with ENOSPC halfway.
  Status Allocate(uint64_t size_bytes);
  Status Sync();

 private:
  int fd_ = -1;
  bool direct_ = false;
  std::string path_;
};

// A whole file mapped read-only (mmap), for baselines that read through the page cache as
// np.memmap users do. Move-only; unmaps on destruction.
enum class MapAdvice { kNormal, kRandom };
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path` whole and applies `advice` (madvise MADV_NORMAL or MADV_RANDOM).
  static Result<MappedFile> Open(const std::string& path, MapAdvice advice);
  const std::byte* data() const { return data_; }
  uint64_t size_bytes() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

// True when files in `dir` accept O_DIRECT (probes with a temporary file).
Result<bool> ProbeDirectIo(const std::string& dir);

// Writes `path` atomically: the bytes go to "<path>.tmp-<pid>", are fsynced, then renamed over
// `path`, and the directory is fsynced. On error the temporary file is removed.
Status WriteFileAtomic(const std::string& path, std::span<const std::byte> bytes);
Status WriteFileAtomic(const std::string& path, const std::string& text);

// Reads a whole (small) file.
Result<std::string> ReadFileToString(const std::string& path);

// fsyncs a directory so a rename in it is durable.
Status SyncDirectory(const std::string& dir);

// zlib's CRC-32 of `length_bytes` at `data`, continuing from `crc` (0 to start).
uint32_t Crc32(uint32_t crc, const void* data, size_t length_bytes);

// A whole file's size and CRC-32.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};
// Reads `path` in chunks and returns its digest.
Result<FileDigest> DigestFile(const std::string& path);
// Copies `from` to `to` (created or truncated; no temporary name: the caller's directory is the
// temporary), fsyncs it, and returns the copy's digest, computed while copying.
Result<FileDigest> CopyFileDurable(const std::string& from, const std::string& to);
// Writes `bytes` to `path` (created or truncated), fsyncs it, and returns its digest.
Result<FileDigest> WriteFileDurable(const std::string& path, std::span<const std::byte> bytes);

// Tests: while enabled, File::Sync and SyncDirectory append the path they made durable, in
// order, to a list that SyncedPathsForTesting returns (enabling clears it).
void RecordSyncsForTesting(bool enabled);
std::vector<std::string> SyncedPathsForTesting();

// Plain synchronous helpers that finish short transfers and retry EINTR; errors name path,
// offset and length. For metadata and small files; bulk io goes through IoExecutor.
Status PreadFull(const File& file, std::byte* buffer, size_t length_bytes, uint64_t offset_bytes);
Status PwriteFull(const File& file, const std::byte* buffer, size_t length_bytes,
                  uint64_t offset_bytes);

}  // namespace sluice
