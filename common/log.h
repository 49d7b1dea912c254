#pragma once
// Minimal leveled logging to stderr, one line per call, safe from any thread.
//   SLUICE_LOG(kInfo, "opened %s (%zu rows)", path.c_str(), rows);

#include <cstdarg>

namespace sluice {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Default kInfo; SLUICE_LOG_LEVEL=debug|info|warning|error
// in the environment overrides it at the first log call.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();

void Log(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace sluice

#define SLUICE_LOG(level, ...)                                                  \
  do {                                                                          \
    if (::sluice::LogLevel::level >= ::sluice::GetLogLevel()) {                 \
      ::sluice::Log(::sluice::LogLevel::level, __FILE__, __LINE__, __VA_ARGS__); \
    }                                                                           \
  } while (0)
