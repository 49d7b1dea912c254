#pragma once
// Threads are planned once at start-up, not accumulated: on a 2-core machine pipeline stage
// threads, the TBB pool, libtorch's intra-op threads and OpenBLAS's threads oversubscribe
// quickly. One setting (`threads.total`) decides all of them; the plan is printed in the summary.

#include <memory>
#include <string>

#include "common/config.h"

namespace sluice {

struct ThreadConfig {
  int total = 0;    // cores the run may use; 0 = all online cores
  int compute = 0;  // libtorch intra-op and OpenBLAS threads; 0 = total
  int tbb = 0;      // TBB worker pool (sampler, gathers); 0 = total
  int blas = 0;     // OpenBLAS threads; 0 = compute

  template <class V>
  void VisitFields(V& v);
};

struct ThreadPlan {
  int cores = 1;            // what the machine offers
  int total = 1;            // what the run may use
  int compute_threads = 1;  // libtorch intra-op threads (set by train/)
  int blas_threads = 1;     // OpenBLAS pool
  int tbb_threads = 1;      // TBB arena size
  // Pipeline stages (sampler, planner + io, ...) each own one thread; they mostly wait on the
  // ring and the disk, so they are not counted against `total`. Set by the task that runs
  // them (the stages that actually run).
  int pipeline_threads = 0;

  std::string ToString() const;
};

// Derives the plan from the config and the online core count.
ThreadPlan MakeThreadPlan(const ThreadConfig& config, int online_cores);
int OnlineCores();

// Names the calling thread for `top -H`, `perf report --sort comm` and debuggers ("sluice-io",
// "sluice-sampler", ...); names are cut to the kernel's 15 characters.
void NameThisThread(const char* name);

// Applies the plan to the process: limits TBB's parallelism (held until the returned handle is
// destroyed) and sets OpenBLAS's thread count when OpenBLAS is loaded. libtorch's intra-op count
// is applied by train/ (common/ does not include libtorch).
class ThreadPlanHandle;
std::unique_ptr<ThreadPlanHandle> ApplyThreadPlan(const ThreadPlan& plan);

class ThreadPlanHandle {
 public:
  ~ThreadPlanHandle();
  struct Impl;
  explicit ThreadPlanHandle(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

template <class V>
void ThreadConfig::VisitFields(V& v) {
  v.Field("total", total, "cores the run may use; 0 = all online cores", InRange(0, 1024));
  v.Field("compute", compute, "libtorch intra-op and OpenBLAS threads; 0 = total",
          InRange(0, 1024));
  v.Field("blas", blas, "OpenBLAS threads; 0 = compute", InRange(0, 1024));
  v.Field("tbb", tbb, "TBB worker threads for data-parallel stage work; 0 = total",
          InRange(0, 1024));
}

}  // namespace sluice
