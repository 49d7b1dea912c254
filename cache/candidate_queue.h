#pragma once
// CandidateQueue: a cache's eviction candidates, in buckets of first-in first-out queues. The
// cache picks a candidate's bucket by its rank (the oracle: its row's uses so far; lru and
// static have one bucket) and pushes candidates as steps release their rows, so the oldest last
// use leaves a bucket first; Pop takes from the lowest non-empty bucket of a range. Push and Pop
// are O(1) (a binary heap ordered the same way cost a sift of log n cache misses each), and the
// candidates behind the next one are known (Peek), so the cache can fetch their index entries
// ahead.
//
// Memory: one pool of fixed-size chunks allocated once; a bucket is a chain of chunks. Room for
// `capacity` candidates in any mix of buckets (each bucket may hold two chunks partly used).
// The cache drops stale candidates (RemoveIf) when the pool is spent (Full).
//
//   CandidateQueue q(/*buckets=*/128, /*capacity=*/2 * rows);
//   if (q.Full()) q.RemoveIf(stale);
//   q.Push(bucket, c);
//   EvictionCandidate c;
//   while (q.Pop(0, 64, c)) { ... }
//
// Thread safety: none.

#include <bit>
#include <cstdint>
#include <vector>

#include "common/check.h"

namespace sluice {

// A resident row, as it was when it became a candidate: stale once its row has been used again
// (last_step changed) or evicted.
struct EvictionCandidate {
  uint64_t id = 0;
  uint32_t table = 0;
  uint32_t last_step = 0;
};
static_assert(sizeof(EvictionCandidate) == 16);

class CandidateQueue {
 public:
  static constexpr uint32_t kChunk = 64;  // candidates a chunk (1 KiB)

  // buckets: a multiple of 64, at most 256 (or 1).
  CandidateQueue(uint32_t buckets, uint64_t capacity);
  // The pool's bytes for that many buckets and candidates.
  static uint64_t Bytes(uint32_t buckets, uint64_t capacity);

  // No chunk is free: a push might find no room (drop stale candidates first).
  bool Full() const { return free_.empty(); }
  uint64_t size() const { return size_; }
  void Push(uint32_t bucket, const EvictionCandidate& c);
  // The first candidate of the lowest non-empty bucket in [from, to) (multiples of 64, or the
  // whole single bucket): false when they are all empty.
  bool Pop(uint32_t from, uint32_t to, EvictionCandidate& out);
  // The candidate n places behind the one Pop(from, to) would give (for prefetching; nullptr when
  // the bucket holds no more or n >= kChunk).
  const EvictionCandidate* Peek(uint32_t from, uint32_t to, uint32_t n) const;
  // Drops the candidates for which stale(c) holds; the others keep their order.
  template <class Stale>
  void RemoveIf(Stale stale);

 private:
  static constexpr uint32_t kNone = ~uint32_t{0};
  struct Bucket {
    uint32_t head = kNone, tail = kNone;  // chunks
    uint32_t head_pos = 0, tail_pos = 0;  // next to pop in head, next to fill in tail
    uint64_t count = 0;
  };
  EvictionCandidate& At(uint32_t chunk, uint32_t pos) { return items_[uint64_t{chunk} * kChunk + pos]; }
  uint32_t Alloc();
  void Free(uint32_t chunk) { free_.push_back(chunk); }
  // The lowest non-empty bucket in [from, to), or kNone.
  uint32_t Lowest(uint32_t from, uint32_t to) const;
  void SetBit(uint32_t b, bool on) {
    if (on) {
      nonempty_[b / 64] |= uint64_t{1} << (b % 64);
    } else {
      nonempty_[b / 64] &= ~(uint64_t{1} << (b % 64));
    }
  }

  std::vector<EvictionCandidate> items_;  // chunk c holds [c * kChunk, (c + 1) * kChunk)
  std::vector<uint32_t> next_;            // a chain's next chunk
  std::vector<uint32_t> free_;            // free chunks (a stack)
  std::vector<Bucket> buckets_;
  std::vector<uint64_t> nonempty_;  // a bit a bucket
  uint64_t size_ = 0;
};

// Push, Pop and Peek are inline: a step calls them about once a row.
inline void CandidateQueue::Push(uint32_t bucket, const EvictionCandidate& c) {
  Bucket& q = buckets_[bucket];
  if (q.count == 0) {
    q.head = q.tail = Alloc();
    q.head_pos = q.tail_pos = 0;
    SetBit(bucket, true);
  } else if (q.tail_pos == kChunk) {
    const uint32_t chunk = Alloc();
    next_[q.tail] = chunk;
    q.tail = chunk;
    q.tail_pos = 0;
  }
  At(q.tail, q.tail_pos++) = c;
  ++q.count;
  ++size_;
}

inline uint32_t CandidateQueue::Lowest(uint32_t from, uint32_t to) const {
  for (uint32_t w = from / 64; w * 64 < to; ++w) {
    uint64_t bits = nonempty_[w];
    if (w * 64 < from) bits &= ~uint64_t{0} << (from % 64);
    if (bits != 0) {
      const uint32_t b = w * 64 + static_cast<uint32_t>(std::countr_zero(bits));
      return b < to ? b : kNone;
    }
  }
  return kNone;
}

inline bool CandidateQueue::Pop(uint32_t from, uint32_t to, EvictionCandidate& out) {
  const uint32_t b = Lowest(from, to);
  if (b == kNone) return false;
  Bucket& q = buckets_[b];
  out = At(q.head, q.head_pos++);
  --size_;
  if (--q.count == 0) {
    Free(q.head);
    q = Bucket{};
    SetBit(b, false);
  } else if (q.head_pos == kChunk) {
    const uint32_t after = next_[q.head];
    Free(q.head);
    q.head = after;
    q.head_pos = 0;
  }
  return true;
}

inline const EvictionCandidate* CandidateQueue::Peek(uint32_t from, uint32_t to, uint32_t n) const {
  const uint32_t b = Lowest(from, to);
  if (b == kNone) return nullptr;
  const Bucket& q = buckets_[b];
  if (n >= q.count || n >= kChunk) return nullptr;
  const uint32_t pos = q.head_pos + n;  // (n < count: the chunk after head exists when needed)
  const uint32_t chunk = pos < kChunk ? q.head : next_[q.head];
  return &items_[uint64_t{chunk} * kChunk + pos % kChunk];
}

template <class Stale>
void CandidateQueue::RemoveIf(Stale stale) {
  for (uint32_t b = 0; b < buckets_.size(); ++b) {
    Bucket& q = buckets_[b];
    if (q.count == 0) continue;
    // Kept candidates slide to the front of the chain (the write cursor never passes the read one).
    uint32_t rc = q.head, rp = q.head_pos, wc = q.head, wp = q.head_pos;
    uint64_t kept = 0;
    for (uint64_t i = 0; i < q.count; ++i) {
      if (rp == kChunk) rc = next_[rc], rp = 0;
      const EvictionCandidate c = At(rc, rp++);
      if (stale(c)) continue;
      if (wp == kChunk) wc = next_[wc], wp = 0;
      At(wc, wp++) = c;
      ++kept;
    }
    for (uint32_t c = kept == 0 ? wc : next_[wc]; c != kNone;) {  // the chunks left empty
      const uint32_t after = next_[c];
      Free(c);
      c = after;
    }
    size_ -= q.count - kept;
    if (kept == 0) {
      q = Bucket{};
      SetBit(b, false);
    } else {
      next_[wc] = kNone;
      q.tail = wc, q.tail_pos = wp, q.count = kept;
    }
  }
}

}  // namespace sluice
