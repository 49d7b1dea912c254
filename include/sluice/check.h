#pragma once
// Public API (the public headers use it). Always-on checks for bugs, not for expected failures
// (those are Status): a failed check prints file:line, the condition and a printf-style message
// to stderr, then aborts.

namespace sluice::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition, const char* fmt,
                              ...) __attribute__((format(printf, 4, 5)));
}  // namespace sluice::internal

#define SLUICE_CHECK(cond, ...)                                                    \
  do {                                                                             \
    if (__builtin_expect(!(cond), 0)) {                                            \
      ::sluice::internal::CheckFailed(__FILE__, __LINE__, #cond, __VA_ARGS__);     \
    }                                                                              \
  } while (0)
