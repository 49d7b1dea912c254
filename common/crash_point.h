#pragma once
// Crash points for crash-safety tests: SLUICE_CRASH_AT=name:n makes the n-th passage through
// CrashPoint("name") kill the process with SIGKILL (no cleanup, like a power cut).
// SLUICE_CRASH_AT=name:n:TERM (or :INT) raises SIGTERM (SIGINT) there instead, so tests can
// interrupt a run at an exact step through its real signal handlers. Unset, a crash point costs
// one branch.

namespace sluice {

void CrashPoint(const char* name);

}  // namespace sluice
