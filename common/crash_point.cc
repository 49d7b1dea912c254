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
  int signal = SIGKILL;
};

const Target* Parse() {
  const char* env = std::getenv("SLUICE_CRASH_AT");
  if (env == nullptr) return nullptr;
  auto* t = new Target;  // lives for the process
  const char* colon = std::strchr(env, ':');
  t->name = colon ? std::string(env, colon) : std::string(env);
  t->count = colon ? std::atol(colon + 1) : 1;
  const char* sig = colon ? std::strchr(colon + 1, ':') : nullptr;
  if (sig != nullptr && std::strcmp(sig + 1, "TERM") == 0) t->signal = SIGTERM;
  if (sig != nullptr && std::strcmp(sig + 1, "INT") == 0) t->signal = SIGINT;
  return t;
}

}  // namespace

void CrashPoint(const char* name) {
  static const Target* target = Parse();
  if (target == nullptr || target->name != name) return;
  static std::atomic<long> seen{0};
  if (++seen == target->count) std::raise(target->signal);
}

}  // namespace sluice
