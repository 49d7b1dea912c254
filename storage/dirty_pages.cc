#include "storage/dirty_pages.h"

#include <zlib.h>

#include <algorithm>
#include <bit>

#include "common/aligned_buffer.h"
#include "storage/file.h"

namespace sluice {
namespace {

std::atomic<uint64_t> next_id{1};

constexpr uint64_t kPagesPerChunk = kCrcChunkBytes / kDirtyPageBytes;
static_assert(kPagesPerChunk % 64 == 0, "a chunk's pages fill whole bitmap words");

uint64_t Chunks(uint64_t bytes) { return (bytes + kCrcChunkBytes - 1) / kCrcChunkBytes; }

bool ChunkDirty(std::span<const uint64_t> dirty, uint64_t chunk) {
  const uint64_t first = chunk * kPagesPerChunk / 64, end = std::min<uint64_t>(first + kPagesPerChunk / 64, dirty.size());
  for (uint64_t w = first; w < end; ++w) {
    if (dirty[w] != 0) return true;
  }
  return false;
}

bool PageDirty(std::span<const uint64_t> dirty, uint64_t page) {
  return (dirty[page / 64] >> (page % 64) & 1) != 0;
}

}  // namespace

uint64_t DirtyWords(uint64_t file_bytes) {
  return (file_bytes + kDirtyPageBytes * 64 - 1) / (kDirtyPageBytes * 64);
}

DirtyPages::DirtyPages(uint64_t file_bytes)
    : id_(next_id.fetch_add(1)), file_bytes_(file_bytes), words_(DirtyWords(file_bytes)),
      bits_(std::make_unique<std::atomic<uint64_t>[]>(words_)) {
  for (uint64_t w = 0; w < words_; ++w) bits_[w].store(0, std::memory_order_relaxed);
}

void DirtyPages::Mark(uint64_t offset_bytes, uint64_t length_bytes) {
  if (length_bytes == 0 || offset_bytes >= file_bytes_) return;
  const uint64_t end = std::min(offset_bytes + length_bytes, file_bytes_);
  const uint64_t first = offset_bytes / kDirtyPageBytes, last = (end - 1) / kDirtyPageBytes;
  for (uint64_t p = first; p <= last;) {
    const uint64_t w = p / 64, lo = p % 64, hi = std::min<uint64_t>(63, lo + (last - p));
    const uint64_t span = hi - lo + 1;
    const uint64_t mask = (span == 64 ? ~uint64_t{0} : ((uint64_t{1} << span) - 1)) << lo;
    bits_[w].fetch_or(mask, std::memory_order_relaxed);
    p += span;
  }
}

std::vector<uint64_t> DirtyPages::Take() {
  std::vector<uint64_t> out(words_);
  for (uint64_t w = 0; w < words_; ++w) out[w] = bits_[w].exchange(0, std::memory_order_acq_rel);
  return out;
}

void OrInto(std::vector<uint64_t>& a, std::span<const uint64_t> b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] |= b[i];
}

uint64_t DirtyBytes(std::span<const uint64_t> bits, uint64_t file_bytes) {
  uint64_t pages = 0;
  for (uint64_t w : bits) pages += static_cast<uint64_t>(std::popcount(w));
  const uint64_t last_page = file_bytes == 0 ? 0 : (file_bytes - 1) / kDirtyPageBytes;
  uint64_t bytes = pages * kDirtyPageBytes;
  if (file_bytes % kDirtyPageBytes != 0 && last_page / 64 < bits.size() && PageDirty(bits, last_page)) {
    bytes -= kDirtyPageBytes - file_bytes % kDirtyPageBytes;
  }
  return bytes;
}

uint32_t ChunkedDigest::Whole() const {
  uLong crc = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const uint64_t len = std::min(kCrcChunkBytes, bytes - i * kCrcChunkBytes);
    crc = i == 0 ? chunks[0] : crc32_combine(crc, chunks[i], static_cast<z_off_t>(len));
  }
  return static_cast<uint32_t>(crc);
}

Result<ChunkedDigest> CopyFileChunked(const std::string& from, const std::string& to) {
  SLUICE_ASSIGN_OR_RETURN(File in, File::Open(from, OpenMode::kRead, false));
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, in.SizeBytes());
  SLUICE_ASSIGN_OR_RETURN(File out, File::Open(to, OpenMode::kCreate, false));
  SLUICE_RETURN_IF_ERROR(out.Allocate(size));  // a full disk fails here, not halfway
  AlignedBuffer buffer(kCrcChunkBytes, kDirectAlignBytes);
  ChunkedDigest d{size, std::vector<uint32_t>(Chunks(size))};
  for (uint64_t c = 0; c < d.chunks.size(); ++c) {
    const uint64_t offset = c * kCrcChunkBytes;
    const size_t n = static_cast<size_t>(std::min(kCrcChunkBytes, size - offset));
    SLUICE_RETURN_IF_ERROR(PreadFull(in, buffer.data(), n, offset));
    d.chunks[c] = Crc32(0, buffer.data(), n);
    SLUICE_RETURN_IF_ERROR(PwriteFull(out, buffer.data(), n, offset));
  }
  SLUICE_RETURN_IF_ERROR(out.Sync());
  return d;
}

Result<ChunkedDigest> PatchFile(const std::string& from, const std::string& to,
                                const ChunkedDigest& base, std::span<const uint64_t> dirty,
                                uint64_t& bytes_written) {
  bytes_written = 0;
  SLUICE_ASSIGN_OR_RETURN(File in, File::Open(from, OpenMode::kRead, false));
  SLUICE_ASSIGN_OR_RETURN(File out, File::Open(to, OpenMode::kReadWrite, false));
  SLUICE_ASSIGN_OR_RETURN(uint64_t in_size, in.SizeBytes());
  SLUICE_ASSIGN_OR_RETURN(uint64_t out_size, out.SizeBytes());
  if (in_size != base.bytes || out_size != base.bytes || base.chunks.size() != Chunks(base.bytes) ||
      dirty.size() != DirtyWords(base.bytes)) {
    return FailedPrecondition("patch " + to + " from " + from + ": sizes differ (" +
                              std::to_string(in_size) + ", " + std::to_string(out_size) + ", " +
                              std::to_string(base.bytes) + " bytes)");
  }
  AlignedBuffer buffer(kCrcChunkBytes, kDirectAlignBytes);
  ChunkedDigest d = base;
  for (uint64_t c = 0; c < d.chunks.size(); ++c) {
    if (!ChunkDirty(dirty, c)) continue;
    const uint64_t offset = c * kCrcChunkBytes;
    const uint64_t n = std::min(kCrcChunkBytes, base.bytes - offset);
    const uint64_t first_page = offset / kDirtyPageBytes;
    const uint64_t end_page = (offset + n + kDirtyPageBytes - 1) / kDirtyPageBytes;
    // The chunk as the copy will hold it: its old bytes with the dirty pages from `from` (all of
    // it from `from` when every page is dirty), so the CRC is of what the copy holds.
    uint64_t clean = 0;
    for (uint64_t p = first_page; p < end_page; ++p) clean += PageDirty(dirty, p) ? 0 : 1;
    SLUICE_RETURN_IF_ERROR(PreadFull(clean == 0 ? in : out, buffer.data(), n, offset));
    for (uint64_t p = first_page; p < end_page;) {
      if (!PageDirty(dirty, p)) {
        ++p;
        continue;
      }
      uint64_t q = p + 1;
      while (q < end_page && PageDirty(dirty, q)) ++q;
      const uint64_t at = p * kDirtyPageBytes, len = std::min(q * kDirtyPageBytes, offset + n) - at;
      if (clean > 0) SLUICE_RETURN_IF_ERROR(PreadFull(in, buffer.data() + (at - offset), len, at));
      SLUICE_RETURN_IF_ERROR(PwriteFull(out, buffer.data() + (at - offset), len, at));
      bytes_written += len;
      p = q;
    }
    d.chunks[c] = Crc32(0, buffer.data(), n);
  }
  SLUICE_RETURN_IF_ERROR(out.Sync());
  return d;
}

}  // namespace sluice
