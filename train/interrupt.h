#pragma once
// Ctrl-C (SIGINT) and SIGTERM while a run trains. The first asks the run to stop after its
// current step: the runner then writes a checkpoint and the process exits 130 (SIGINT) or 143
// (SIGTERM) with a message saying how to resume. A second signal of either kind ends the
// process at once, as the default action would.

namespace sluice {

class InterruptScope {
 public:
  // Installs the handlers and clears any earlier signal. One scope at a time.
  InterruptScope();
  // Restores the handlers that were installed before.
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  // The signal received since the scope began (SIGINT or SIGTERM), or 0. Async-signal-safe.
  static int Received();
};

// The exit status of a process stopped by `signal` (128 + signal), as a shell reports it.
inline int ExitCodeForSignal(int signal) { return 128 + signal; }

}  // namespace sluice
