#pragma once
// Incremental copies of a table file, for checkpoints that rewrite only what changed.
//
// DirtyPages marks the 4 KiB pages of a file that were written since the last Take(): RowFile
// marks every extent it writes (before the write is issued, so a page is never written
// unmarked), and the block cache's direct path marks the blocks it writes back.
//
// A ChunkedDigest is a file's CRC-32 kept per 1 MiB chunk, so the whole file's CRC-32 after a
// patch comes from the chunks' (zlib's crc32_combine) without reading the unchanged ones.
// PatchFile brings an old copy of a file up to date by rewriting only the dirty pages.
//
// Thread safety: Mark may be called from any thread at once; Take must not race Mark on the
// pages it reports (the caller takes after the writers are stopped and flushed).

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace sluice {

inline constexpr uint64_t kDirtyPageBytes = 4096;
inline constexpr uint64_t kCrcChunkBytes = uint64_t{1} << 20;

class DirtyPages {
 public:
  explicit DirtyPages(uint64_t file_bytes);
  // Unique among the process's DirtyPages: a copy's history holds only for the map that
  // tracked it (a table file opened again starts another).
  uint64_t id() const { return id_; }
  uint64_t file_bytes() const { return file_bytes_; }
  // Marks the pages that [offset, offset + length) touches (clipped to the file).
  void Mark(uint64_t offset_bytes, uint64_t length_bytes);
  // The pages marked since the previous Take (bit p of word p / 64), and clears them.
  std::vector<uint64_t> Take();

 private:
  uint64_t id_, file_bytes_, words_;
  std::unique_ptr<std::atomic<uint64_t>[]> bits_;
};

// The words of a page bitmap for a file of `file_bytes`.
uint64_t DirtyWords(uint64_t file_bytes);
// a |= b (same length).
void OrInto(std::vector<uint64_t>& a, std::span<const uint64_t> b);
// Bytes of the file covered by set bits (the last page clipped to the file's end).
uint64_t DirtyBytes(std::span<const uint64_t> bits, uint64_t file_bytes);

struct ChunkedDigest {
  uint64_t bytes = 0;
  std::vector<uint32_t> chunks;  // CRC-32 of each kCrcChunkBytes chunk (the last may be short)
  // The whole file's CRC-32.
  uint32_t Whole() const;
};

// Copies `from` to `to` (created or truncated, blocks reserved first), fsyncs it, and returns
// its chunked digest, computed while copying.
Result<ChunkedDigest> CopyFileChunked(const std::string& from, const std::string& to);

// `to` holds what `from` held when `base` was its digest, except for the pages set in `dirty`:
// those pages are copied from `from`, each chunk that holds one is read whole (from `to`, or
// from `from` when all its pages are dirty) for its new CRC, `to` is fsynced, and the new
// digest returned. `bytes_written` gets the bytes
// written. Both files must be base.bytes long.
Result<ChunkedDigest> PatchFile(const std::string& from, const std::string& to,
                                const ChunkedDigest& base, std::span<const uint64_t> dirty,
                                uint64_t& bytes_written);

}  // namespace sluice
