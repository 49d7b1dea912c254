#include "sampler/negatives.h"

#include <algorithm>

#include "sampler/random.h"

namespace sluice {

NegativeSampler NegativeSampler::Uniform(std::vector<NodeRange> ranges) {
  NegativeSampler s;
  s.range_start_.push_back(0);
  for (const NodeRange& r : ranges) {
    SLUICE_CHECK(r.begin < r.end, "empty node range [%lld, %lld)", static_cast<long long>(r.begin),
                 static_cast<long long>(r.end));
    s.range_start_.push_back(s.range_start_.back() + (r.end - r.begin));
  }
  SLUICE_CHECK(!ranges.empty(), "uniform negatives need at least one node range");
  s.ranges_ = std::move(ranges);
  return s;
}

NegativeSampler NegativeSampler::Weighted(std::span<const double> weights) {
  NegativeSampler s;
  s.cdf_.resize(weights.size());
  double sum = 0;
  for (size_t v = 0; v < weights.size(); ++v) {
    SLUICE_CHECK(weights[v] >= 0, "negative sampling weight of node %zu is negative", v);
    s.cdf_[v] = sum += weights[v];
  }
  SLUICE_CHECK(sum > 0, "negative sampling weights sum to zero");
  return s;
}

std::vector<int64_t> NegativeSampler::Sample(const SampleKey& key, uint32_t chunks,
                                             uint32_t per_chunk) const {
  const Key k = Key(key.seed).With(key.epoch).With(key.step).With(0x6e6567);  // "neg"
  std::vector<int64_t> out(uint64_t{chunks} * per_chunk);
  for (uint64_t i = 0; i < out.size(); ++i) {
    if (cdf_.empty()) {
      const int64_t x = static_cast<int64_t>(k.Below(i, static_cast<uint64_t>(range_start_.back())));
      const size_t r = static_cast<size_t>(
          std::upper_bound(range_start_.begin(), range_start_.end(), x) - range_start_.begin() - 1);
      out[i] = ranges_[r].begin + (x - range_start_[r]);
    } else {
      const double u = k.Unit(i) * cdf_.back();
      out[i] = std::min<int64_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin(),
                                 static_cast<int64_t>(cdf_.size()) - 1);
    }
  }
  return out;
}

size_t EdgeFilter::Hash::operator()(const Triple& x) const {
  return static_cast<size_t>(Key(static_cast<uint64_t>(x.h))
                                 .With(static_cast<uint64_t>(x.r))
                                 .With(static_cast<uint64_t>(x.t))
                                 .Bits(0));
}

}  // namespace sluice
