#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace sluice {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("SLUICE_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& LevelStorage() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

const char* LevelTag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

void SetLogLevel(LogLevel level) { LevelStorage().store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(LevelStorage().load()); }

void Log(LogLevel level, const char* file, int line, const char* fmt, ...) {
  char message[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  const char* base = std::strrchr(file, '/');
  std::time_t now = std::time(nullptr);
  std::tm tm_now{};
  localtime_r(&now, &tm_now);
  char stamp[16];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm_now);
  // One fprintf call per line: stdio locks the stream, so lines from threads do not interleave.
  std::fprintf(stderr, "%s %s %s:%d] %s\n", LevelTag(level), stamp, base ? base + 1 : file, line,
               message);
}

}  // namespace sluice
