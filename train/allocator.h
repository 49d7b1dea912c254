#pragma once

// The process's malloc: which one it is, how training tunes it, and handing its free memory back.
//
// Training allocates and frees the same multi-megabyte tensors every step, of sizes that change
// a little from step to step. Two allocators are known:
// - jemalloc (the `sluice` executable links it when the build finds it; a program may preload
//   it): size classes keep those tensors from splitting each other's free space. TuneAllocator
//   turns its time-based return of free pages off (every step would fault and zero them again),
//   unless MALLOC_CONF says otherwise. On the 10M-node graph of configs/nc_scale.yaml the peak
//   RSS was 2.77 GiB against glibc's 3.23 GiB at the same epoch times (docs/benchmarks.md).
// - glibc: TuneAllocator keeps tensors below 512 MiB in the heap (no mapping, zeroing and
//   unmapping per step) and uses one arena; each of its variables in the environment wins.
// Both keep what training freed until ReleaseFreeHeap, which the runner calls once an epoch.

namespace sluice {

// "jemalloc" when jemalloc's mallctl is in the process, else "glibc".
const char* AllocatorName();

// Once per process (later calls do nothing); Run::FromConfig and Run::Open call it.
void TuneAllocator();

// Hands the allocator's free pages back to the system (every arena), so the resident set shows
// what is live: without it the resident set steps up for a few epochs with nothing live behind it.
void ReleaseFreeHeap();

}  // namespace sluice
