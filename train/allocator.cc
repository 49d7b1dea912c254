#include "train/allocator.h"

#include <dlfcn.h>
#include <malloc.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace sluice {
namespace {

using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);

// jemalloc's control interface, looked up at run time so the library works on either malloc.
MallctlFn Mallctl() {
  static const auto fn = reinterpret_cast<MallctlFn>(::dlsym(RTLD_DEFAULT, "mallctl"));
  return fn;
}

// jemalloc: free pages stay with the process until ReleaseFreeHeap, in every arena it has and
// in those it makes later (the pipeline's threads start afresh each epoch).
void KeepFreePages(MallctlFn mallctl) {
  ssize_t never = -1;
  for (const char* key : {"arenas.dirty_decay_ms", "arenas.muzzy_decay_ms"}) {
    mallctl(key, nullptr, nullptr, &never, sizeof never);
  }
  unsigned arenas = 0;
  size_t size = sizeof arenas;
  if (mallctl("arenas.narenas", &arenas, &size, nullptr, 0) != 0) return;
  for (unsigned i = 0; i < arenas; ++i) {
    for (const char* kind : {"dirty", "muzzy"}) {
      const std::string key = "arena." + std::to_string(i) + "." + kind + "_decay_ms";
      mallctl(key.c_str(), nullptr, nullptr, &never, sizeof never);  // an arena not yet made: refused, harmless
    }
  }
}

}  // namespace

const char* AllocatorName() { return Mallctl() != nullptr ? "jemalloc" : "glibc"; }

void TuneAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (MallctlFn mallctl = Mallctl()) {
      if (std::getenv("MALLOC_CONF") == nullptr) KeepFreePages(mallctl);
      return;
    }
    // glibc would map and unmap each tensor of a step (page faults and zeroing: a fifth of a
    // DLRM step, 8% of a whole run); one arena, since with an arena per thread the free memory
    // each kept made the resident set step up by 2-4% over a 30-epoch soak.
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 512 << 20);
    if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 1 << 30);
    if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 1);
  });
}

void ReleaseFreeHeap() {
  if (MallctlFn mallctl = Mallctl()) {
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);  // 4096: MALLCTL_ARENAS_ALL
    return;
  }
  malloc_trim(0);
}

}  // namespace sluice
