#include "storage/file.h"

#include <fcntl.h>
#include <zlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "common/aligned_buffer.h"
#include "common/log.h"
#include "storage/fault_injection.h"

namespace sluice {
namespace {

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void WarnBufferedOnce(const std::string& path) {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (warned.insert(DirName(path)).second) {
    SLUICE_LOG(kWarning, "%s: the filesystem refuses O_DIRECT; using buffered io for files here",
               DirName(path).c_str());
  }
}

std::atomic<bool> g_record_syncs{false};
std::mutex g_syncs_mu;
std::vector<std::string>* g_syncs = new std::vector<std::string>;  // lives for the process

void NoteSync(const std::string& path) {
  if (!g_record_syncs.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_syncs_mu);
  g_syncs->push_back(path);
}

int Flags(OpenMode mode) {
  switch (mode) {
    case OpenMode::kRead: return O_RDONLY;
    case OpenMode::kReadWrite: return O_RDWR;
    case OpenMode::kCreate: return O_RDWR | O_CREAT | O_TRUNC;
  }
  return O_RDONLY;
}

}  // namespace

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      direct_(other.direct_),
      path_(std::move(other.path_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    direct_ = other.direct_;
    path_ = std::move(other.path_);
  }
  return *this;
}

Result<File> File::Open(const std::string& path, OpenMode mode, bool want_direct) {
  File file;
  file.path_ = path;
  const int flags = Flags(mode) | O_CLOEXEC;
  if (want_direct) {
    file.fd_ = ::open(path.c_str(), flags | O_DIRECT, 0644);
    if (file.fd_ >= 0) {
      file.direct_ = true;
      return file;
    }
    if (errno != EINVAL) return ErrnoStatus("open " + path, errno);
    WarnBufferedOnce(path);
  }
  file.fd_ = ::open(path.c_str(), flags, 0644);
  if (file.fd_ < 0) return ErrnoStatus("open " + path, errno);
  return file;
}

Result<uint64_t> File::SizeBytes() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return ErrnoStatus("stat " + path_, errno);
  return static_cast<uint64_t>(st.st_size);
}

Status File::Truncate(uint64_t size_bytes) {
  if (::ftruncate(fd_, static_cast<off_t>(size_bytes)) != 0) {
    return ErrnoStatus("truncate " + path_ + " to " + std::to_string(size_bytes) + " bytes", errno);
  }
  return Status::Ok();
}

Status File::Allocate(uint64_t size_bytes) {
  if (size_bytes == 0) return Status::Ok();
  int rc = ::posix_fallocate(fd_, 0, static_cast<off_t>(size_bytes));
  if (rc == EOPNOTSUPP || rc == EINVAL) return Truncate(size_bytes);  // e.g. some FUSE mounts
  if (rc != 0) {
    return ErrnoStatus("allocate " + std::to_string(size_bytes) + " bytes for " + path_, rc);
  }
  return Status::Ok();
}

Status File::Sync() {
  if (::fsync(fd_) != 0) return ErrnoStatus("fsync " + path_, errno);
  NoteSync(path_);
  return Status::Ok();
}

void RecordSyncsForTesting(bool enabled) {
  std::lock_guard<std::mutex> lock(g_syncs_mu);
  g_syncs->clear();
  g_record_syncs.store(enabled);
}

std::vector<std::string> SyncedPathsForTesting() {
  std::lock_guard<std::mutex> lock(g_syncs_mu);
  return *g_syncs;
}

Result<bool> ProbeDirectIo(const std::string& dir) {
  std::string probe = dir + "/.sluice-direct-probe-" + std::to_string(::getpid());
  int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    return true;
  }
  if (errno == EINVAL) return false;
  return ErrnoStatus("probe O_DIRECT in " + dir, errno);
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open directory " + dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return ErrnoStatus("fsync directory " + dir, err);
  NoteSync(dir);
  return Status::Ok();
}

namespace {

// The part of a `length` transfer a "short" fault lets through: half, kept aligned for O_DIRECT
// (0: too small to split, the op goes through whole).
size_t ShortLength(const File& file, size_t length) {
  size_t part = length / 2;
  if (file.direct()) part = part / kDirectAlignBytes * kDirectAlignBytes;
  return part;
}

// Applies the process's injected fault (if any) to one transfer of a Full loop: true when the
// transfer must fail (errno set); a short fault shrinks `length`, a latency fault waits.
bool InjectFault(IoKind op, const File& file, size_t& length) {
  ProcessFaults* faults = ProcessFaults::Get();
  if (faults == nullptr) return false;
  const FaultAction a = faults->Next(op, file.path());
  if (a.kind == FaultKind::kError) {
    errno = a.error;
    return true;
  }
  if (a.kind == FaultKind::kShort && ShortLength(file, length) > 0) length = ShortLength(file, length);
  SleepForFault(a);
  return false;
}

}  // namespace

Status PreadFull(const File& file, std::byte* buffer, size_t length_bytes, uint64_t offset_bytes) {
  size_t done = 0;
  while (done < length_bytes) {
    size_t length = length_bytes - done;
    ssize_t n = InjectFault(IoKind::kRead, file, length)
                    ? -1 : ::pread(file.fd(), buffer + done, length, static_cast<off_t>(offset_bytes + done));
    if (n < 0 && errno == EINTR) continue;
    std::string what = "read " + file.path() + " offset " + std::to_string(offset_bytes) +
                       " length " + std::to_string(length_bytes);
    if (n < 0) return ErrnoStatus(what, errno);
    if (n == 0) {
      return Corruption(what + ": file ends after " + std::to_string(offset_bytes + done) +
                        " bytes");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status PwriteFull(const File& file, const std::byte* buffer, size_t length_bytes,
                  uint64_t offset_bytes) {
  size_t done = 0;
  while (done < length_bytes) {
    size_t length = length_bytes - done;
    ssize_t n = InjectFault(IoKind::kWrite, file, length)
                    ? -1 : ::pwrite(file.fd(), buffer + done, length, static_cast<off_t>(offset_bytes + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return ErrnoStatus("write " + file.path() + " offset " + std::to_string(offset_bytes) +
                             " length " + std::to_string(length_bytes),
                         n < 0 ? errno : EIO);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::span<const std::byte> bytes) {
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  Status status = [&]() -> Status {
    SLUICE_ASSIGN_OR_RETURN(File file, File::Open(temp, OpenMode::kCreate, /*want_direct=*/false));
    SLUICE_RETURN_IF_ERROR(PwriteFull(file, bytes.data(), bytes.size(), 0));
    SLUICE_RETURN_IF_ERROR(file.Sync());
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      return ErrnoStatus("rename " + temp + " to " + path, errno);
    }
    return SyncDirectory(DirName(path));
  }();
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

Status WriteFileAtomic(const std::string& path, const std::string& text) {
  return WriteFileAtomic(
      path, std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()),
                                       text.size()));
}

Result<std::string> ReadFileToString(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kRead, false));
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, file.SizeBytes());
  std::string text(size, '\0');
  SLUICE_RETURN_IF_ERROR(PreadFull(file, reinterpret_cast<std::byte*>(text.data()), size, 0));
  return text;
}

uint32_t Crc32(uint32_t crc, const void* data, size_t length_bytes) {
  uLong c = crc;
  const auto* p = static_cast<const Bytef*>(data);
  while (length_bytes > 0) {  // zlib takes 32-bit lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(length_bytes, size_t{1} << 30));
    c = crc32(c, p, n);
    p += n;
    length_bytes -= n;
  }
  return static_cast<uint32_t>(c);
}

namespace {
constexpr size_t kDigestChunkBytes = 8 << 20;
}  // namespace

Result<FileDigest> DigestFile(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kRead, false));
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, file.SizeBytes());
  AlignedBuffer buffer(std::min<uint64_t>(kDigestChunkBytes, std::max<uint64_t>(size, 1)),
                       kDirectAlignBytes);
  FileDigest digest{size, 0};
  for (uint64_t offset = 0; offset < size; offset += buffer.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - offset));
    SLUICE_RETURN_IF_ERROR(PreadFull(file, buffer.data(), n, offset));
    digest.crc32 = Crc32(digest.crc32, buffer.data(), n);
  }
  return digest;
}

Result<FileDigest> CopyFileDurable(const std::string& from, const std::string& to) {
  SLUICE_ASSIGN_OR_RETURN(File in, File::Open(from, OpenMode::kRead, false));
  SLUICE_ASSIGN_OR_RETURN(uint64_t size, in.SizeBytes());
  SLUICE_ASSIGN_OR_RETURN(File out, File::Open(to, OpenMode::kCreate, false));
  SLUICE_RETURN_IF_ERROR(out.Allocate(size));  // a full disk fails here, not halfway
  AlignedBuffer buffer(std::min<uint64_t>(kDigestChunkBytes, std::max<uint64_t>(size, 1)),
                       kDirectAlignBytes);
  FileDigest digest{size, 0};
  for (uint64_t offset = 0; offset < size; offset += buffer.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - offset));
    SLUICE_RETURN_IF_ERROR(PreadFull(in, buffer.data(), n, offset));
    digest.crc32 = Crc32(digest.crc32, buffer.data(), n);
    SLUICE_RETURN_IF_ERROR(PwriteFull(out, buffer.data(), n, offset));
  }
  SLUICE_RETURN_IF_ERROR(out.Sync());
  return digest;
}

Result<FileDigest> WriteFileDurable(const std::string& path, std::span<const std::byte> bytes) {
  SLUICE_ASSIGN_OR_RETURN(File out, File::Open(path, OpenMode::kCreate, false));
  SLUICE_RETURN_IF_ERROR(PwriteFull(out, bytes.data(), bytes.size(), 0));
  SLUICE_RETURN_IF_ERROR(out.Sync());
  return FileDigest{bytes.size(), Crc32(0, bytes.data(), bytes.size())};
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<MappedFile> MappedFile::Open(const std::string& path, MapAdvice advice) {
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(path, OpenMode::kRead, /*want_direct=*/false));
  SLUICE_ASSIGN_OR_RETURN(const uint64_t size, file.SizeBytes());
  MappedFile m;
  if (size == 0) return m;
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd(), 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap " + path, errno);
  m.data_ = static_cast<std::byte*>(p);
  m.size_ = size;
  if (madvise(p, size, advice == MapAdvice::kRandom ? MADV_RANDOM : MADV_NORMAL) != 0) {
    return ErrnoStatus("madvise " + path, errno);
  }
  return m;
}

}  // namespace sluice
