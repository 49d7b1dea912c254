#pragma once
// Helpers shared by the storage tests: a temporary directory removed afterwards, and backends.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "storage/fault_backend.h"
#include "storage/io_session.h"

namespace sluice::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/sluice-test-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
    EXPECT_FALSE(path_.empty());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::unique_ptr<IoSession> Session(BackendKind kind, uint32_t depth = 8,
                                          uint32_t slot_bytes = 64 * 1024) {
  auto backend = MakeBackend(kind, depth);
  EXPECT_TRUE(backend.ok()) << backend.status().ToString();
  return std::make_unique<IoSession>(std::move(backend).value(), slot_bytes);
}

// A session over a FaultBackend wrapping pread; `fault` points at it for arming rules.
inline std::unique_ptr<IoSession> FaultSession(FaultBackend** fault, uint32_t depth = 8,
                                               uint32_t slot_bytes = 64 * 1024) {
  auto backend = std::make_unique<FaultBackend>(MakePreadBackend(depth));
  *fault = backend.get();
  return std::make_unique<IoSession>(std::move(backend), slot_bytes);
}

}  // namespace sluice::testing
