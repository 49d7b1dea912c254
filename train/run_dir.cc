#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <fstream>
#include <string>

#include "common/status.h"

namespace sluice {

std::string FormatCount(double x) {
  char buf[32];
  if (x >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fG", x / 1e9);
  } else if (x >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  } else if (x >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", x / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", x);
  }
  return buf;
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", s);
  return buf;
}

namespace {
uint64_t StatusField(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stoull(line.substr(prefix.size())) * 1024;
  }
  return 0;
}
}  // namespace

uint64_t PeakRssBytes() { return StatusField("VmHWM"); }
uint64_t CurrentRssBytes() { return StatusField("VmRSS"); }

Status AppendLine(const std::string& path, const std::string& line) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return ErrnoStatus("open " + path, errno);
  const bool ok = std::fputs((line + "\n").c_str(), f) >= 0 && std::fflush(f) == 0;
  std::fclose(f);
  if (!ok) return IoError("write " + path + ": failed");
  return Status::Ok();
}

Result<RunDirLock> RunDirLock::Acquire(const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return IoError("create run directory " + run_dir + ": " + ec.message());
  const std::string path = run_dir + "/lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return ErrnoStatus("lock " + path, err);
    std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "?";
    while (!pid.empty() && pid.back() == '\n') pid.pop_back();
    return FailedPrecondition("run directory " + run_dir + " is in use by another sluice train "
                              "(pid " + pid + "); wait for it to finish or choose another run_dir");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("write " + path, err);
  }
  return RunDirLock(fd);
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

}  // namespace sluice
