#include "storage/fault_injection.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace sluice {
namespace {

[[noreturn]] void BadSpec(const std::string& spec, const std::string& why) {
  std::fprintf(stderr, "sluice: error: SLUICE_FAULT=%s: %s (expected <read|write>:<eio|enospc|short|latency>:"
               "<path>[:<first>[:<times>|all]])\n", spec.c_str(), why.c_str());
  std::fflush(stderr);
  std::_Exit(2);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = s.find(':', start)) != std::string::npos; start = colon + 1) {
    parts.push_back(s.substr(start, colon - start));
  }
  parts.push_back(s.substr(start));
  return parts;
}

uint64_t Number(const std::string& spec, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) BadSpec(spec, "'" + text + "' is not a count");
  return v;
}

// SLUICE_FAULT_REPORT=<file>: at exit, the number of faults that fired is written there, so a
// test knows its cell was exercised.
void WriteReport() {
  const char* path = std::getenv("SLUICE_FAULT_REPORT");
  if (path == nullptr || ProcessFaults::Get() == nullptr) return;
  if (std::FILE* f = std::fopen(path, "w")) {
    std::fprintf(f, "%llu %llu\n", static_cast<unsigned long long>(ProcessFaults::Get()->fired()),
                 static_cast<unsigned long long>(ProcessFaults::Get()->seen()));
    std::fclose(f);
  }
}

}  // namespace

ProcessFaults* ProcessFaults::Get() {
  static ProcessFaults* const faults = []() -> ProcessFaults* {
    const char* env = std::getenv("SLUICE_FAULT");
    if (env == nullptr || *env == '\0') return nullptr;
    const std::string spec = env;
    const std::vector<std::string> p = Split(spec);
    if (p.size() < 3 || p.size() > 5) BadSpec(spec, "3 to 5 fields");
    auto* f = new ProcessFaults;  // lives as long as the process
    if (p[0] == "read") {
      f->op_ = IoKind::kRead;
    } else if (p[0] == "write") {
      f->op_ = IoKind::kWrite;
    } else {
      BadSpec(spec, "op '" + p[0] + "'");
    }
    if (p[1] == "eio") {
      f->action_ = {FaultKind::kError, EIO};
    } else if (p[1] == "enospc") {
      f->action_ = {FaultKind::kError, ENOSPC};
    } else if (p[1] == "short") {
      f->action_ = {FaultKind::kShort, 0};
    } else if (p[1] == "latency") {
      f->action_ = {FaultKind::kLatency, 0};
    } else {
      BadSpec(spec, "fault '" + p[1] + "'");
    }
    if (p[2].empty()) BadSpec(spec, "an empty path");
    f->path_ = p[2];
    if (p.size() > 3) f->first_ = Number(spec, p[3]);
    if (p.size() > 4) f->times_ = p[4] == "all" ? UINT64_MAX : Number(spec, p[4]);
    std::atexit(&WriteReport);
    return f;
  }();
  return faults;
}

FaultAction ProcessFaults::Next(IoKind op, const std::string& path) {
  if (op != op_ || path.find(path_) == std::string::npos) return {};
  const uint64_t n = seen_.fetch_add(1);
  if (n < first_ || n - first_ >= times_) return {};
  fired_.fetch_add(1);
  return action_;
}

FaultAction ProcessFaults::NextFd(IoKind op, int fd) {
  if (op != op_) return {};
  char link[64], target[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, target, sizeof target - 1);
  if (n <= 0) return {};
  return Next(op, std::string(target, static_cast<size_t>(n)));
}

void SleepForFault(const FaultAction& a) {
  // Simulated device latency, not synchronisation.
  if (a.kind == FaultKind::kLatency) std::this_thread::sleep_for(std::chrono::nanoseconds(ProcessFaults::kLatencyNs));
}

}  // namespace sluice
