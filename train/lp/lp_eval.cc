#include "train/lp/lp_eval.h"

#include <cstdio>
#include <limits>

#include "common/json.h"
#include "sampler/random.h"
#include "prefetch/edge_schedule.h"

namespace sluice {

std::string LpMetrics::ToString() const {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "MRR %.4f Hits@1 %.4f Hits@3 %.4f Hits@10 %.4f (%s, %s, %llu edges)", mrr, hits1,
                hits3, hits10, exact ? "all nodes" : "sampled nodes",
                filtered ? "filtered" : "unfiltered", static_cast<unsigned long long>(edges));
  return buf;
}

std::string LpMetrics::ToJson() const {
  JsonObject o;
  o.Add("mrr", mrr).Add("hits1", hits1).Add("hits3", hits3).Add("hits10", hits10);
  o.Add("edges", edges).Add("ranking", exact ? "all" : "sampled").Add("filtered", filtered);
  return o.str();
}

LpRanker::LpRanker(const Dataset& dataset, const LpConfig& config, uint64_t num_relations)
    : dataset_(dataset), cfg_(config),
      base_relations_(num_relations / (config.model.reciprocal ? 2 : 1)) {}

// Known true edges: tails of (h, r) and heads of (r, t) over every split.
Status LpRanker::BuildFilter() {
  if (filter_built_) return Status::Ok();
  for (const char* split_name : {"train", "valid", "test"}) {
    if (!dataset_.Has(std::string("edges.") + split_name + ".src")) continue;
    std::vector<int64_t> a, r, b;
    SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, split_name, a, r, b));
    for (size_t i = 0; i < a.size(); ++i) {
      const auto rel = static_cast<uint64_t>(r[i]);
      tails_of_[static_cast<uint64_t>(a[i]) * base_relations_ + rel].push_back(b[i]);
      heads_of_[static_cast<uint64_t>(b[i]) * base_relations_ + rel].push_back(a[i]);
    }
  }
  filter_built_ = true;
  return Status::Ok();
}

LpRanker::Known LpRanker::KnownOf(bool tails, const std::vector<int64_t>& a,
                                  const std::vector<int64_t>& rel, uint64_t lo, int64_t b) const {
  const auto& map = tails ? tails_of_ : heads_of_;
  Known known(static_cast<size_t>(b), nullptr);
  for (int64_t i = 0; i < b; ++i) {
    auto it = map.find(static_cast<uint64_t>(a[lo + i]) * base_relations_ +
                       static_cast<uint64_t>(rel[lo + i]));
    known[i] = it == map.end() ? nullptr : &it->second;
  }
  return known;
}

void LpRanker::RankRows(const LpDecoder& decoder, const torch::Tensor& q,
                        const torch::Tensor& truth, const torch::Tensor& nodes,
                        const torch::Tensor& candidates, const Known& known, const LpMetrics& m,
                        Sums& sums) const {
  torch::Tensor true_score = decoder.Score(q, nodes.index_select(0, truth));
  torch::Tensor scores = decoder.ScoreAll(q, candidates);
  if (m.filtered) {
    auto a = scores.accessor<float, 2>();
    for (int64_t i = 0; i < q.size(0); ++i) {
      if (known[i] == nullptr) continue;
      for (int64_t x : *known[i]) a[i][x] = -std::numeric_limits<float>::infinity();
    }
  }
  torch::Tensor ts = true_score.unsqueeze(1);
  torch::Tensor greater = (scores > ts).sum(1).to(torch::kDouble);
  torch::Tensor equal = (scores == ts).sum(1).to(torch::kDouble);
  // In an exact unfiltered ranking the true node ties with itself; filtered, it was removed.
  if (m.exact && !m.filtered) equal = equal - 1;
  torch::Tensor rank = 1 + greater + equal.clamp_min(0) / 2;
  auto ra = rank.accessor<double, 1>();
  for (int64_t i = 0; i < rank.size(0); ++i) {
    const double x = ra[i];
    sums.rr += 1.0 / x;
    sums.h1 += x <= 1;
    sums.h3 += x <= 3;
    sums.h10 += x <= 10;
    ++sums.ranked;
  }
}

Result<LpMetrics> LpRanker::Rank(const std::string& split, const LpDecoder& decoder,
                                 const torch::Tensor& nodes, const torch::Tensor& relations) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> src, rel, dst;
  SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, split, src, rel, dst));
  LpMetrics m;
  const uint64_t num_nodes = static_cast<uint64_t>(nodes.size(0));
  m.exact = num_nodes <= cfg_.eval.exact_max_nodes;
  m.filtered = cfg_.eval.filtered && m.exact;
  if (m.filtered) SLUICE_RETURN_IF_ERROR(BuildFilter());
  torch::Tensor rels = relations.detach();
  const uint64_t n = cfg_.eval.max_edges > 0 ? std::min<uint64_t>(src.size(), cfg_.eval.max_edges)
                                             : src.size();
  m.edges = n;
  torch::Tensor candidates = nodes;
  if (!m.exact) {
    const Key k = Key(cfg_.train.seed).With(0xE7A1);
    std::vector<int64_t> ids(static_cast<size_t>(cfg_.eval.sampled_negatives));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(k.Below(i, num_nodes));
    candidates = nodes.index_select(0, torch::tensor(ids));
  }
  Sums sums;
  for (uint64_t lo = 0; lo < n; lo += 256) {
    const auto b = static_cast<int64_t>(std::min<uint64_t>(n, lo + 256) - lo);
    torch::Tensor hs = torch::from_blob(src.data() + lo, {b}, torch::kInt64);
    torch::Tensor ts = torch::from_blob(dst.data() + lo, {b}, torch::kInt64);
    torch::Tensor rs = torch::from_blob(rel.data() + lo, {b}, torch::kInt64);
    torch::Tensor h = nodes.index_select(0, hs), t = nodes.index_select(0, ts);
    const Known none(static_cast<size_t>(b), nullptr);
    // Tails of (h, r, ?).
    RankRows(decoder, decoder.TailQuery(h, rels.index_select(0, rs)), ts, nodes, candidates,
             m.filtered ? KnownOf(true, src, rel, lo, b) : none, m, sums);
    // Heads of (?, r, t): the reciprocal relation's tails, or the head query.
    torch::Tensor hq =
        cfg_.model.reciprocal
            ? decoder.TailQuery(t, rels.index_select(0, rs + static_cast<int64_t>(base_relations_)))
            : decoder.HeadQuery(rels.index_select(0, rs), t);
    RankRows(decoder, hq, hs, nodes, candidates,
             m.filtered ? KnownOf(false, dst, rel, lo, b) : none, m, sums);
  }
  const double k = std::max<double>(1.0, static_cast<double>(sums.ranked));
  m.mrr = sums.rr / k, m.hits1 = sums.h1 / k, m.hits3 = sums.h3 / k, m.hits10 = sums.h10 / k;
  return m;
}

}  // namespace sluice
