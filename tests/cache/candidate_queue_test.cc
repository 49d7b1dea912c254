// CandidateQueue: random pushes, pops over bucket ranges and stale-dropping passes, replayed
// against a plain model (a deque a bucket): every pop gives the model's candidate (the lowest
// non-empty bucket's oldest), Peek names the one n places behind it, RemoveIf keeps the order of
// the survivors, and a pool sized for `capacity` candidates never runs out while at most that
// many are queued.

#include "cache/candidate_queue.h"

#include <deque>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

bool Same(const EvictionCandidate& a, const EvictionCandidate& b) {
  return a.id == b.id && a.table == b.table && a.last_step == b.last_step;
}

// The model's pop from [from, to): the first candidate of the lowest non-empty bucket.
std::deque<EvictionCandidate>* Lowest(std::vector<std::deque<EvictionCandidate>>& model, uint32_t from, uint32_t to) {
  for (uint32_t b = from; b < to; ++b) {
    if (!model[b].empty()) return &model[b];
  }
  return nullptr;
}

TEST(CandidateQueue, ReplaysAModelOfFifoBuckets) {
  constexpr uint32_t kBuckets = 256;
  constexpr uint64_t kCapacity = 3000;
  CandidateQueue q(kBuckets, kCapacity);
  std::vector<std::deque<EvictionCandidate>> model(kBuckets);
  std::mt19937_64 rng(5);
  uint64_t queued = 0, next_id = 0;
  for (int op = 0; op < 200000; ++op) {
    const uint64_t r = rng() % 100;
    // Skewed buckets (most candidates in a few low ones, as uses are), so chains grow long.
    const uint32_t bucket = static_cast<uint32_t>((rng() % 4 == 0 ? rng() : rng() % 8) % kBuckets);
    if (r < 55 && queued < kCapacity) {
      const EvictionCandidate c{next_id++, static_cast<uint32_t>(rng() % 3), static_cast<uint32_t>(op)};
      ASSERT_FALSE(q.Full()) << "the pool ran out with " << queued << " candidates queued";
      q.Push(bucket, c);
      model[bucket].push_back(c);
      ++queued;
    } else if (r < 98) {
      const uint32_t from = rng() % 2 == 0 ? 0 : 128, to = from == 0 && rng() % 2 == 0 ? 256 : from + 128;
      std::deque<EvictionCandidate>* m = Lowest(model, from, to);
      for (uint32_t n : {0u, 1u, 16u, 63u}) {
        const EvictionCandidate* ahead = q.Peek(from, to, n);
        if (m == nullptr || n >= m->size()) {
          EXPECT_EQ(ahead, nullptr);
        } else {
          ASSERT_NE(ahead, nullptr);
          EXPECT_TRUE(Same(*ahead, (*m)[n])) << "peek " << n;
        }
      }
      EvictionCandidate c;
      ASSERT_EQ(q.Pop(from, to, c), m != nullptr);
      if (m != nullptr) {
        EXPECT_TRUE(Same(c, m->front())) << "op " << op;
        m->pop_front();
        --queued;
      }
    } else {
      const uint64_t mod = 2 + rng() % 5;  // drop every candidate whose id is a multiple of mod
      auto stale = [mod](const EvictionCandidate& c) { return c.id % mod == 0; };
      q.RemoveIf(stale);
      for (auto& d : model) {
        for (auto it = d.begin(); it != d.end();) {
          if (stale(*it)) {
            it = d.erase(it);
            --queued;
          } else {
            ++it;
          }
        }
      }
    }
    ASSERT_EQ(q.size(), queued);
  }
  // Drained in bucket order, each bucket first in, first out.
  for (uint32_t b = 0; b < kBuckets; ++b) {
    for (const EvictionCandidate& want : model[b]) {
      EvictionCandidate c;
      ASSERT_TRUE(q.Pop(0, kBuckets, c));
      EXPECT_TRUE(Same(c, want));
    }
  }
  EvictionCandidate c;
  EXPECT_FALSE(q.Pop(0, kBuckets, c));
  EXPECT_FALSE(q.Full());
}

TEST(CandidateQueue, OneBucketIsAQueueThatFillsItsPool) {
  CandidateQueue q(1, 1000);
  uint64_t pushed = 0;
  while (!q.Full()) q.Push(0, EvictionCandidate{pushed, 0, static_cast<uint32_t>(pushed)}), ++pushed;
  EXPECT_GE(pushed, 1000u - CandidateQueue::kChunk);  // the pool holds at least its capacity less a chunk
  q.RemoveIf([](const EvictionCandidate& c) { return c.id % 2 == 1; });
  EXPECT_FALSE(q.Full());
  EvictionCandidate c;
  for (uint64_t id = 0; id < pushed; id += 2) {
    ASSERT_TRUE(q.Pop(0, 1, c));
    EXPECT_EQ(c.id, id);
  }
  EXPECT_FALSE(q.Pop(0, 1, c));
  EXPECT_EQ(q.size(), 0u);
}

}  // namespace
}  // namespace sluice
