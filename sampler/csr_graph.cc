#include "sampler/csr_graph.h"

#include <algorithm>

#include "storage/file.h"

namespace sluice {

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
  g.neighbors_.resize(from.size());
  std::vector<uint64_t> next(g.offsets_.begin(), g.offsets_.end() - 1);
  for (size_t i = 0; i < from.size(); ++i) g.neighbors_[next[from[i]]++] = to[i];
  return g;
}

bool CsrGraph::HasEdge(int64_t u, int64_t v) const {
  auto n = neighbors(u);
  return std::find(n.begin(), n.end(), v) != n.end();
}

namespace {

// Reads elements [first, first + count) of an int32 or int64 dataset array as int64.
Status ReadIds(const Dataset& ds, const DatasetFile& f, uint64_t first, uint64_t count,
               std::vector<int64_t>& out) {
  const size_t base = out.size();
  out.resize(base + count);
  if (count == 0) return Status::Ok();
  SLUICE_ASSIGN_OR_RETURN(File file, File::Open(ds.PathOf(f), OpenMode::kRead, false));
  if (f.dtype == DType::kInt64) {
    return PreadFull(file, reinterpret_cast<std::byte*>(out.data() + base), count * 8, first * 8);
  }
  if (f.dtype != DType::kInt32) {
    return InvalidArgument("dataset " + ds.dir() + ": " + f.role + " is not an id array");
  }
  std::vector<int32_t> narrow(count);
  SLUICE_RETURN_IF_ERROR(
      PreadFull(file, reinterpret_cast<std::byte*>(narrow.data()), count * 4, first * 4));
  std::copy(narrow.begin(), narrow.end(), out.begin() + static_cast<int64_t>(base));
  return Status::Ok();
}

}  // namespace

Result<CsrGraph> CsrGraph::Load(const Dataset& dataset, const std::string& split,
                                Direction direction, std::span<const uint32_t> partitions) {
  const Manifest& m = dataset.manifest();
  const std::string prefix = "edges." + split + (direction == Direction::kIn ? ".by_dst" : "");
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* src, dataset.File(prefix + ".src"));
  SLUICE_ASSIGN_OR_RETURN(const DatasetFile* dst, dataset.File(prefix + ".dst"));
  SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> buckets, dataset.ReadInt64(prefix + ".buckets"));
  const uint32_t p = m.num_partitions();
  std::vector<uint32_t> resident(partitions.begin(), partitions.end());
  if (resident.empty()) {
    for (uint32_t k = 0; k < p; ++k) resident.push_back(k);
  }
  std::sort(resident.begin(), resident.end());
  std::vector<int64_t> from, to;
  for (uint32_t i : resident) {
    if (i >= p) return OutOfRange("partition " + std::to_string(i) + " of " + std::to_string(p));
    for (uint32_t j : resident) {  // bucket (i, j): major partition i, minor j
      const uint64_t a = buckets[uint64_t{i} * p + j], b = buckets[uint64_t{i} * p + j + 1];
      // By source: major = src. By destination: major = dst, and in-neighbours are sources.
      SLUICE_RETURN_IF_ERROR(ReadIds(dataset, direction == Direction::kOut ? *src : *dst, a,
                                     b - a, from));
      SLUICE_RETURN_IF_ERROR(ReadIds(dataset, direction == Direction::kOut ? *dst : *src, a,
                                     b - a, to));
    }
  }
  return FromEdges(m.num_nodes, from, to);
}

}  // namespace sluice
