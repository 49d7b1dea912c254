#include "common/crash_point.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sluice {
namespace {

struct Target {
  std::string name;
  long count = 0;
};

const Target* Parse() {
  const char* env = std::getenv("SLUICE_CRASH_AT");
  if (env == nullptr) return nullptr;
  const char* colon = std::strchr(env, ':');
  auto* t = new Target;  // lives for the process
  t->name = colon ? std::string(env, colon) : std::string(env);
  t->count = colon ? std::atol(colon + 1) : 1;
  return t;
}

}  // namespace

void CrashPoint(const char* name) {
  static const Target* target = Parse();
  if (target == nullptr || target->name != name) return;
  static std::atomic<long> seen{0};
  if (++seen == target->count) std::raise(SIGKILL);
}

}  // namespace sluice
