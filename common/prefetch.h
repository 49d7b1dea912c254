#pragma once

#include <cstddef>

namespace sluice {

// Rows scattered over a table or an arena defeat the hardware prefetcher: loops over such rows
// ask for the row a few positions ahead with these while they work on this one. Every 64-byte
// line of [p, p + bytes) is requested; nothing is read, so p may be any address.
inline void PrefetchForRead(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t at = 0; at < bytes; at += 64) __builtin_prefetch(c + at, 0);
}

// The same for rows about to be written (an optimizer's value and state).
inline void PrefetchForWrite(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t at = 0; at < bytes; at += 64) __builtin_prefetch(c + at, 1);
}

}  // namespace sluice
