#include "sampler/link_neighbors.h"

#include <algorithm>

#include "sampler/khop_draw.h"

namespace sluice {

LinkNeighborSampler::LinkNeighborSampler(uint64_t num_nodes, int fanout, uint64_t seed)
    : num_nodes_(num_nodes), fanout_(fanout), seed_(seed), stamp_(num_nodes, 0) {}

void LinkNeighborSampler::SetGraph(std::span<const int64_t> src, std::span<const int64_t> dst) {
  out_ = CsrGraph::FromEdges(num_nodes_, src, dst);
  in_ = CsrGraph::FromEdges(num_nodes_, dst, src);
}

void LinkNeighborSampler::Draw(int64_t v, uint64_t epoch, uint64_t step, std::vector<int64_t>& out) const {
  const uint64_t d_out = out_.degree(v), d_in = in_.degree(v), d = d_out + d_in;
  const uint64_t count = khop::SampleSize(d, fanout_, /*replace=*/false);
  int64_t pos[256];  // fanout is at most 256 (the config's range)
  khop::DrawPositions(0, d, v, fanout_, /*replace=*/false, khop::HopKey(seed_, epoch, step, 1), pos, count);
  for (uint64_t i = 0; i < count; ++i) {
    const auto p = static_cast<uint64_t>(pos[i]);
    out.push_back(p < d_out ? out_.neighbor_at(out_.offset(v) + p) : in_.neighbor_at(in_.offset(v) + p - d_out));
  }
}

void LinkNeighborSampler::Sample(uint64_t epoch, uint64_t step, LinkBatch& b) {
  if (++call_ == 0) {  // the stamps wrap: forget them all once every 2^32 calls
    std::fill(stamp_.begin(), stamp_.end(), 0);
    call_ = 1;
  }
  const uint64_t tag = uint64_t{call_} << 32;
  b.seeds = b.unique.size();
  for (uint64_t i = 0; i < b.seeds; ++i) stamp_[static_cast<uint64_t>(b.unique[i])] = tag | i;
  b.nbr_offsets.assign(1, 0);
  b.nbr.clear();
  std::vector<int64_t> drawn;
  for (uint64_t i = 0; i < b.seeds; ++i) {
    drawn.clear();
    Draw(b.unique[i], epoch, step, drawn);
    for (int64_t u : drawn) {
      uint64_t& s = stamp_[static_cast<uint64_t>(u)];
      if ((s & ~uint64_t{0xFFFFFFFF}) != tag) {
        s = tag | b.unique.size();
        b.unique.push_back(u);
      }
      b.nbr.push_back(static_cast<int64_t>(s & 0xFFFFFFFF));
    }
    b.nbr_offsets.push_back(static_cast<int64_t>(b.nbr.size()));
  }
}

void LinkNeighborSampler::SampleIds(std::span<const int64_t> seeds, std::vector<int64_t>& offsets,
                                    std::vector<int64_t>& neighbors) const {
  offsets.assign(1, 0);
  neighbors.clear();
  for (int64_t v : seeds) {
    Draw(v, kEvalNeighborEpoch, 0, neighbors);
    offsets.push_back(static_cast<int64_t>(neighbors.size()));
  }
}

}  // namespace sluice
