#pragma once
// Negative sampling for link prediction, replayable from (seed, epoch, step): uniform over all
// nodes or over the resident partitions' id ranges, or degree-proportional; negatives shared
// per chunk of the batch (as Marius and PyTorch-BigGraph do). A known-edge set filters true
// edges out of evaluation rankings.

#include <cstdint>
#include <span>
#include <unordered_set>
#include <vector>

#include "sampler/khop_sampler.h"

namespace sluice {

struct NodeRange {
  int64_t begin;
  int64_t end;  // exclusive
};

class NegativeSampler {
 public:
  // Uniform over the union of `ranges` (e.g. the resident partitions; one range [0, N) for
  // all nodes).
  static NegativeSampler Uniform(std::vector<NodeRange> ranges);
  // Proportional to weights[v] (e.g. degree) over all nodes; zero weights are never drawn.
  static NegativeSampler Weighted(std::span<const double> weights);

  // chunks x per_chunk negatives for one step: row c holds chunk c's shared negatives.
  std::vector<int64_t> Sample(const SampleKey& key, uint32_t chunks, uint32_t per_chunk) const;

 private:
  std::vector<NodeRange> ranges_;
  std::vector<int64_t> range_start_;  // cumulative sizes, for uniform
  std::vector<double> cdf_;           // cumulative weights, for weighted
};

// The true edges of a graph, for filtered ranking: (head, relation, tail) triples.
class EdgeFilter {
 public:
  void Add(int64_t head, int64_t relation, int64_t tail) { set_.insert({head, relation, tail}); }
  bool Contains(int64_t head, int64_t relation, int64_t tail) const {
    return set_.count({head, relation, tail}) != 0;
  }
  size_t size() const { return set_.size(); }

 private:
  struct Triple {
    int64_t h, r, t;
    bool operator==(const Triple&) const = default;
  };
  struct Hash {
    size_t operator()(const Triple& x) const;
  };
  std::unordered_set<Triple, Hash> set_;
};

}  // namespace sluice
