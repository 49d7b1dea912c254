#include "sampler/csr_graph.h"

#include <algorithm>

#include "storage/file.h"

namespace sluice {
namespace {

constexpr uint64_t kNarrowNodes = uint64_t{1} << 31;
constexpr uint64_t kPieceIds = uint64_t{1} << 20;  // ids read per piece while loading

// Reads elements [first, first + count) of an int32 or int64 dataset array as int64 into
// `out` (replacing its contents).
Status ReadIds(const Dataset& ds, const DatasetFile& f, uint64_t first, uint64_t count,
               std::vector<int64_t>& out, std::vector<int32_t>& narrow) {
  out.resize(count);
  if (count == 0) return Status::Ok();
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(ds.PathOf(f), OpenMode::kRead, false));
  if (f.dtype == DType::kInt64) {
    return PreadFull(file, reinterpret_cast<std::byte*>(out.data()), count * 8, first * 8);
  }
  if (f.dtype != DType::kInt32) {
    return InvalidArgument("dataset " + ds.dir() + ": " + f.role + " is not an id array");
  }
  narrow.resize(count);
  SLUICE_RETURN_IF_ERROR(
      PreadFull(file, reinterpret_cast<std::byte*>(narrow.data()), count * 4, first * 4));
  std::copy(narrow.begin(), narrow.end(), out.begin());
  return Status::Ok();
}

// The first id of `ids` outside [0, n), or -1.
int64_t FirstOutOfRange(std::span<const int64_t> ids, uint64_t n) {
  for (int64_t v : ids) {
    if (v < 0 || static_cast<uint64_t>(v) >= n) return v;
  }
  return -1;
}

Status OutOfGraph(const Dataset& ds, const DatasetFile& f, int64_t v, uint64_t n) {
  return Corruption("dataset " + ds.dir() + ": " + f.role + " names node " + std::to_string(v) +
                    ", outside the graph's " + std::to_string(n) + " nodes");
}

}  // namespace

void CsrGraph::AllocateNeighbors(uint64_t edges) {
  narrow_ = num_nodes() < kNarrowNodes;
  if (narrow_) {
    neighbors32_.assign(edges, 0);
  } else {
    neighbors64_.assign(edges, 0);
  }
}

CsrGraph CsrGraph::FromEdges(uint64_t num_nodes, std::span<const int64_t> from,
                             std::span<const int64_t> to) {
  SLUICE_CHECK(from.size() == to.size(), "edge arrays differ in length");
  CsrGraph g;
  g.offsets_.assign(num_nodes + 1, 0);
  for (int64_t u : from) {
    SLUICE_CHECK(u >= 0 && static_cast<uint64_t>(u) < num_nodes, "node %lld out of range",
                 static_cast<long long>(u));
    ++g.offsets_[u + 1];
  }
  for (uint64_t v = 0; v < num_nodes; ++v) g.offsets_[v + 1] += g.offsets_[v];
  g.AllocateNeighbors(from.size());
  std::vector<uint64_t> next(g.offsets_.begin(), g.offsets_.end() - 1);
  for (size_t i = 0; i < from.size(); ++i) g.SetNeighbor(next[from[i]]++, to[i]);
  return g;
}

uint64_t CsrGraph::BytesFor(uint64_t num_nodes, uint64_t num_edges) {
  return (num_nodes + 1) * sizeof(uint64_t) + num_edges * (num_nodes < kNarrowNodes ? 4 : 8);
}

uint64_t CsrGraph::MemoryBytes() const {
  return offsets_.size() * sizeof(uint64_t) + neighbors32_.size() * 4 + neighbors64_.size() * 8;
}

std::vector<int64_t> CsrGraph::neighbors(int64_t v) const {
  std::vector<int64_t> out(degree(v));
  for (uint64_t i = 0; i < out.size(); ++i) out[i] = neighbor_at(offsets_[v] + i);
  return out;
}

bool CsrGraph::HasEdge(int64_t u, int64_t v) const {
  for (uint64_t i = offsets_[u]; i < offsets_[u + 1]; ++i) {
    if (neighbor_at(i) == v) return true;
  }
  return false;
}

Result<CsrGraph> CsrGraph::Load(const Dataset& dataset, const std::string& split,
                                Direction direction, std::span<const uint32_t> partitions) {
  const Manifest& m = dataset.manifest();
  const std::string prefix = "edges." + split + (direction == Direction::kIn ? ".by_dst" : "");
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* src, dataset.File(prefix + ".src"));
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* dst, dataset.File(prefix + ".dst"));
  SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> buckets, dataset.ReadInt64(prefix + ".buckets"));
  // By source: major = src. By destination: major = dst, and in-neighbours are sources.
  const DatasetFile& major = direction == Direction::kOut ? *src : *dst;
  const DatasetFile& minor = direction == Direction::kOut ? *dst : *src;
  const uint32_t p = m.num_partitions();
  std::vector<uint32_t> resident(partitions.begin(), partitions.end());
  if (resident.empty()) {
    for (uint32_t k = 0; k < p; ++k) resident.push_back(k);
  }
  std::sort(resident.begin(), resident.end());
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // bucket (i, j)'s edges, in order
  for (uint32_t i : resident) {
    if (i >= p) return OutOfRange("partition " + std::to_string(i) + " of " + std::to_string(p));
    for (uint32_t j : resident) {
      ranges.emplace_back(buckets[uint64_t{i} * p + j], buckets[uint64_t{i} * p + j + 1]);
    }
  }
  const uint64_t n = m.num_nodes;
  CsrGraph g;
  g.offsets_.assign(n + 1, 0);
  std::vector<int64_t> a, b;
  std::vector<int32_t> narrow;
  uint64_t edges = 0;
  for (auto [first, last] : ranges) {  // 1. degrees
    for (uint64_t at = first; at < last; at += kPieceIds) {
      SLUICE_RETURN_IF_ERROR(ReadIds(dataset, major, at, std::min(kPieceIds, last - at), a, narrow));
      if (int64_t bad = FirstOutOfRange(a, n); bad != -1) return OutOfGraph(dataset, major, bad, n);
      for (int64_t v : a) ++g.offsets_[v + 1];
      edges += a.size();
    }
  }
  for (uint64_t v = 0; v < n; ++v) g.offsets_[v + 1] += g.offsets_[v];
  g.AllocateNeighbors(edges);
  for (auto [first, last] : ranges) {  // 2. placement, offsets_[v] as v's cursor
    for (uint64_t at = first; at < last; at += kPieceIds) {
      const uint64_t k = std::min(kPieceIds, last - at);
      SLUICE_RETURN_IF_ERROR(ReadIds(dataset, major, at, k, a, narrow));
      SLUICE_RETURN_IF_ERROR(ReadIds(dataset, minor, at, k, b, narrow));
      if (int64_t bad = FirstOutOfRange(b, n); bad != -1) return OutOfGraph(dataset, minor, bad, n);
      for (uint64_t i = 0; i < k; ++i) g.SetNeighbor(g.offsets_[a[i]]++, b[i]);
    }
  }
  // Each cursor ended at the next node's start: shift them back.
  for (uint64_t v = n; v > 0; --v) g.offsets_[v] = g.offsets_[v - 1];
  g.offsets_[0] = 0;
  return g;
}

}  // namespace sluice
