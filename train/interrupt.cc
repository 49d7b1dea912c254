#include "train/interrupt.h"

#include <atomic>
#include <csignal>

namespace sluice {
namespace {

std::atomic<int> g_received{0};

extern "C" void OnStopSignal(int sig) {
  int expected = 0;
  if (!g_received.compare_exchange_strong(expected, sig)) {
    std::signal(sig, SIG_DFL);  // a second signal: stop now
    std::raise(sig);
  }
}

struct sigaction g_old_int, g_old_term;

}  // namespace

InterruptScope::InterruptScope() {
  g_received.store(0);
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptScope::~InterruptScope() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int InterruptScope::Received() { return g_received.load(); }

}  // namespace sluice
