#include "train/run_dir.h"

#include <cstdio>
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

}  // namespace sluice
