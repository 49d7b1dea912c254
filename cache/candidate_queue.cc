#include "cache/candidate_queue.h"

namespace sluice {

namespace {
// Chunks for `capacity` candidates: a bucket's head and tail chunks may each be partly used.
uint64_t Chunks(uint32_t buckets, uint64_t capacity) {
  return (capacity + CandidateQueue::kChunk - 1) / CandidateQueue::kChunk + 2 * uint64_t{buckets};
}
}  // namespace

CandidateQueue::CandidateQueue(uint32_t buckets, uint64_t capacity) {
  SLUICE_CHECK(buckets == 1 || (buckets % 64 == 0 && buckets <= 256), "candidate queue: %u buckets", buckets);
  const uint64_t chunks = Chunks(buckets, capacity);
  SLUICE_CHECK(chunks < kNone, "candidate queue: %llu candidates", static_cast<unsigned long long>(capacity));
  items_.resize(chunks * kChunk);
  next_.assign(chunks, kNone);
  free_.reserve(chunks);
  for (uint64_t c = chunks; c > 0; --c) free_.push_back(static_cast<uint32_t>(c - 1));
  buckets_.resize(buckets);
  nonempty_.assign((buckets + 63) / 64, 0);
}

uint64_t CandidateQueue::Bytes(uint32_t buckets, uint64_t capacity) {
  return Chunks(buckets, capacity) * (kChunk * sizeof(EvictionCandidate) + 2 * sizeof(uint32_t));
}

uint32_t CandidateQueue::Alloc() {
  SLUICE_CHECK(!free_.empty(), "candidate queue: no chunk free (%llu candidates)",
               static_cast<unsigned long long>(size_));
  const uint32_t c = free_.back();
  free_.pop_back();
  next_[c] = kNone;
  return c;
}

}  // namespace sluice
