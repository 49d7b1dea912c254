#include "common/thread_plan.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <tbb/global_control.h>

#include "common/config.h"

namespace sluice {

void NameThisThread(const char* name) {
  char cut[16] = {};
  std::snprintf(cut, sizeof(cut), "%s", name);
  pthread_setname_np(pthread_self(), cut);
}

int OnlineCores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

ThreadPlan MakeThreadPlan(const ThreadConfig& config, int online_cores) {
  ThreadPlan plan;
  plan.cores = std::max(1, online_cores);
  plan.total = config.total > 0 ? config.total : plan.cores;
  plan.compute_threads = config.compute > 0 ? config.compute : plan.total;
  plan.blas_threads = config.blas > 0 ? config.blas : plan.compute_threads;
  plan.tbb_threads = config.tbb > 0 ? config.tbb : plan.total;
  return plan;
}

std::string ThreadPlan::ToString() const {
  char text[256];
  std::snprintf(text, sizeof(text),
                "threads: %d of %d cores; compute (libtorch) %d, OpenBLAS %d, TBB %d, "
                "pipeline stages %d",
                total, cores, compute_threads, blas_threads, tbb_threads, pipeline_threads);
  return text;
}

struct ThreadPlanHandle::Impl {
  tbb::global_control tbb_limit;
  explicit Impl(int tbb_threads)
      : tbb_limit(tbb::global_control::max_allowed_parallelism,
                  static_cast<size_t>(tbb_threads)) {}
};

ThreadPlanHandle::ThreadPlanHandle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ThreadPlanHandle::~ThreadPlanHandle() = default;

std::unique_ptr<ThreadPlanHandle> ApplyThreadPlan(const ThreadPlan& plan) {
  // OpenBLAS may or may not be in the process (libtorch loads it); look it up, do not link it.
  using SetThreads = void (*)(int);
  if (auto* set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(plan.blas_threads);
  }
  return std::make_unique<ThreadPlanHandle>(
      std::make_unique<ThreadPlanHandle::Impl>(plan.tbb_threads));
}

}  // namespace sluice
