#pragma once
// Clang's thread-safety annotations (-Wthread-safety), as LevelDB's port/thread_annotations.h
// spells them; no-ops under other compilers. GUARDED_BY(mu) on a field says which mutex
// guards it; REQUIRES(mu) on a function that its caller holds it.

#if defined(__clang__)
#define SLUICE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SLUICE_THREAD_ANNOTATION(x)
#endif

#define GUARDED_BY(x) SLUICE_THREAD_ANNOTATION(guarded_by(x))
#define REQUIRES(...) SLUICE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) SLUICE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
