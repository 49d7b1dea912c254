#pragma once
// Crash points for crash-safety tests: SLUICE_CRASH_AT=name:n makes the n-th passage through
// CrashPoint("name") kill the process with SIGKILL (no cleanup, like a power cut). Unset, a
// crash point costs one branch.

namespace sluice {

void CrashPoint(const char* name);

}  // namespace sluice
