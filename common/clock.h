#pragma once
// Stage timing: seconds on the steady clock.

#include <chrono>

namespace sluice {

using SteadyClock = std::chrono::steady_clock;

inline double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace sluice
