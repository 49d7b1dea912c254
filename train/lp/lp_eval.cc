#include "train/lp/lp_eval.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include "common/json.h"
#include "train/model_step.h"
#include "train/torch_io.h"
#include "sampler/random.h"
#include "prefetch/edge_schedule.h"

namespace sluice {

std::string LpMetrics::ToString() const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "MRR %.4f Hits@1 %.4f Hits@3 %.4f Hits@10 %.4f (%s, %s, %llu edges); "
                "tails MRR %.4f Hits@10 %.4f, heads MRR %.4f Hits@10 %.4f",
                mrr, hits1, hits3, hits10, exact ? "all nodes" : "sampled nodes",
                filtered ? "filtered" : "unfiltered", static_cast<unsigned long long>(edges),
                tails.mrr, tails.hits10, heads.mrr, heads.hits10);
  std::string text = buf;
  if (exact) {
    std::snprintf(buf, sizeof buf, "; own entity first %.1f%%", 100.0 * own_top);
    text += buf;
  }
  return text;
}

std::string LpSideMetrics::ToJson() const {
  JsonObject o;
  o.Add("mrr", mrr).Add("hits1", hits1).Add("hits3", hits3).Add("hits10", hits10);
  o.Add("own_top", own_top);
  return o.str();
}

std::string LpMetrics::ToJson() const {
  JsonObject o;
  o.Add("mrr", mrr).Add("hits1", hits1).Add("hits3", hits3).Add("hits10", hits10);
  o.Add("own_top", own_top);
  o.Add("edges", edges).Add("ranking", exact ? "all" : "sampled").Add("filtered", filtered);
  o.AddRaw("tails", tails.ToJson()).AddRaw("heads", heads.ToJson());
  return o.str();
}

void LpRanker::Sums::Add(const std::vector<double>& ranks, const std::vector<uint8_t>& own) {
  for (const uint8_t x : own) own_top += x;
  for (const double x : ranks) {
    rr += 1.0 / x;
    h1 += x <= 1;
    h3 += x <= 3;
    h10 += x <= 10;
    ++ranked;
  }
}

void LpRanker::Sums::Add(const Sums& o) {
  rr += o.rr, h1 += o.h1, h3 += o.h3, h10 += o.h10, ranked += o.ranked, own_top += o.own_top;
}

LpSideMetrics LpRanker::Sums::Metrics() const {
  const double k = std::max<double>(1.0, static_cast<double>(ranked));
  LpSideMetrics m;
  m.mrr = rr / k, m.hits1 = h1 / k, m.hits3 = h3 / k, m.hits10 = h10 / k;
  m.own_top = static_cast<double>(own_top) / k;
  return m;
}

LpRanker::LpRanker(const Dataset& dataset, const LpConfig& config, uint64_t num_relations)
    : dataset_(dataset), cfg_(config),
      base_relations_(num_relations / (config.model.reciprocal ? 2 : 1)) {}

void LpRanker::AnswerIndex::Build(std::vector<std::pair<uint64_t, int64_t>>& pairs) {
  std::sort(pairs.begin(), pairs.end());
  keys.clear(), offsets.clear(), answers.clear();
  answers.reserve(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i == 0 || pairs[i].first != pairs[i - 1].first) {
      keys.push_back(pairs[i].first);
      offsets.push_back(answers.size());
    }
    answers.push_back(pairs[i].second);
  }
  offsets.push_back(answers.size());
  keys.shrink_to_fit(), offsets.shrink_to_fit();
}

std::span<const int64_t> LpRanker::AnswerIndex::Of(uint64_t key) const {
  const auto it = std::lower_bound(keys.begin(), keys.end(), key);
  if (it == keys.end() || *it != key) return {};
  const auto i = static_cast<size_t>(it - keys.begin());
  return {answers.data() + offsets[i], offsets[i + 1] - offsets[i]};
}

// Known true edges: tails of (h, r) and heads of (r, t) over every split.
Status LpRanker::BuildFilter() {
  if (filter_built_) return Status::Ok();
  std::vector<std::pair<uint64_t, int64_t>> tails, heads;
  for (const char* split_name : {"train", "valid", "test"}) {
    if (!dataset_.Has(std::string("edges.") + split_name + ".src")) continue;
    std::vector<int64_t> a, r, b;
    SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, split_name, a, r, b));
    for (size_t i = 0; i < a.size(); ++i) {
      const auto rel = static_cast<uint64_t>(r[i]);
      tails.emplace_back(static_cast<uint64_t>(a[i]) * base_relations_ + rel, b[i]);
      heads.emplace_back(static_cast<uint64_t>(b[i]) * base_relations_ + rel, a[i]);
    }
  }
  tails_of_.Build(tails);
  std::vector<std::pair<uint64_t, int64_t>>().swap(tails);
  heads_of_.Build(heads);
  filter_built_ = true;
  return Status::Ok();
}

LpRanker::Known LpRanker::KnownOf(bool tails, const std::vector<int64_t>& a,
                                  const std::vector<int64_t>& rel, uint64_t lo, int64_t b) const {
  const AnswerIndex& index = tails ? tails_of_ : heads_of_;
  Known known(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    known[i] = index.Of(static_cast<uint64_t>(a[lo + i]) * base_relations_ + static_cast<uint64_t>(rel[lo + i]));
  }
  return known;
}

namespace {

std::string ShapeText(const torch::Tensor& x) {
  if (!x.defined()) return "(undefined)";
  std::string s = "[";
  for (int64_t i = 0; i < x.dim(); ++i) s += (i ? ", " : "") + std::to_string(x.size(i));
  return s + "]";
}

}  // namespace

Status DecoderScorer::Score(const torch::Tensor& anchors, const torch::Tensor& rel,
                            bool corrupt_head, const torch::Tensor& truth,
                            const torch::Tensor& candidates, torch::Tensor& true_score,
                            torch::Tensor& scores) {
  torch::Tensor r = relations_.index_select(0, rel);
  torch::Tensor q = corrupt_head ? decoder_.HeadQuery(r, anchors) : decoder_.TailQuery(anchors, r);
  true_score = decoder_.Score(q, truth);
  // The score matrix in blocks of 64 rows on the TBB workers (libtorch runs one thread each):
  // every core scores, and a row's scores come from the same block product whatever the thread
  // count. (16-row blocks kept the products too thin: 28 s against 20 s on the graph of
  // docs/link_prediction.md's evaluation section.)
  const int64_t b = q.size(0);
  constexpr int64_t kRows = 64;
  scores = torch::empty({b, candidates.size(0)}, q.options());
  const bool bilinear = decoder_.kind() != Decoder::kTransE;
  const torch::Tensor cand_t = candidates.t();
  tbb::parallel_for(int64_t{0}, (b + kRows - 1) / kRows, [&](int64_t block) {
    const int64_t lo = block * kRows, m = std::min(b, lo + kRows) - lo;
    torch::Tensor out = scores.narrow(0, lo, m);
    if (bilinear) {
      torch::mm_out(out, q.narrow(0, lo, m), cand_t);
    } else {
      out.copy_(decoder_.ScoreAll(q.narrow(0, lo, m), candidates));
    }
  });
  return Status::Ok();
}

Status ModelScorer::Score(const torch::Tensor& anchors, const torch::Tensor& rel,
                          bool corrupt_head, const torch::Tensor& truth,
                          const torch::Tensor& candidates, torch::Tensor& true_score,
                          torch::Tensor& scores) {
  const int64_t b = anchors.size(0), c = candidates.size(0);
  ModelInput in;
  in.training = false;
  in.tables.resize(2);
  in.tables[0].uses = anchors;
  in.tables[0].rows = b;
  in.tables[1].uses = torch::cat({truth, candidates}, 0);
  in.tables[1].rows = b + c;
  in.ids["relation"] = rel;
  in.sizes["corrupt_head"] = corrupt_head ? 1 : 0;
  torch::Tensor all;
  try {
    all = model_.Predict(InputOn(in, ModelDevice(model_))).to(torch::kCPU);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("the model failed ranking ") +
                           (corrupt_head ? "heads" : "tails") + ": " + FirstLine(e.what()));
  }
  if (all.dim() != 2 || all.size(0) != b || all.size(1) != b + c) {
    return InvalidArgument("the model's Predict returned scores of shape " +
                           ShapeText(all) + " for " + std::to_string(b) + " anchors and " +
                           std::to_string(b + c) + " candidates (expected [anchors, candidates])");
  }
  all = all.to(torch::kFloat32);
  true_score = all.narrow(1, 0, b).diagonal().contiguous();
  scores = all.narrow(1, b, c).contiguous();
  return Status::Ok();
}

std::vector<double> LpRanker::RowRanks(const torch::Tensor& true_score, torch::Tensor& scores,
                                       const Known& known, const LpMetrics& m,
                                       const int64_t* anchors, std::vector<uint8_t>& own_top) const {
  scores = scores.to(torch::kFloat32).contiguous();
  const torch::Tensor truth = true_score.to(torch::kFloat32).contiguous();
  const int64_t b = scores.size(0), c = scores.size(1);
  float* s = scores.data_ptr<float>();
  const float* t = truth.data_ptr<float>();
  // In an exact unfiltered ranking the true node ties with itself; filtered, it was removed.
  const bool self_tie = m.exact && !m.filtered;
  std::vector<double> ranks(static_cast<size_t>(b));
  own_top.assign(static_cast<size_t>(b), 0);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, b, 4), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      float* row = s + i * c;
      if (m.filtered) {
        for (const int64_t x : known[i]) row[x] = -std::numeric_limits<float>::infinity();
      }
      const float ti = t[i];
      int64_t greater = 0, equal = 0;
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < c; ++j) {
        greater += row[j] > ti;
        equal += row[j] == ti;
        top = std::max(top, row[j]);
      }
      if (m.exact) {  // candidates are every node: the anchor's column is its id
        const float own = row[anchors[i]];
        own_top[static_cast<size_t>(i)] = own > ti && own == top;
      }
      if (self_tie) equal -= 1;
      ranks[static_cast<size_t>(i)] = 1.0 + static_cast<double>(greater) +
                                      static_cast<double>(std::max<int64_t>(equal, 0)) / 2.0;
    }
  });
  return ranks;
}

Result<LpMetrics> LpRanker::Rank(const std::string& split, LpScorer& scorer,
                                 const torch::Tensor& nodes) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> src, rel, dst;
  SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, split, src, rel, dst));
  LpMetrics m;
  const uint64_t num_nodes = static_cast<uint64_t>(nodes.size(0));
  m.exact = num_nodes <= cfg_.eval.exact_max_nodes;
  m.filtered = cfg_.eval.filtered && m.exact;
  if (m.filtered) SLUICE_RETURN_IF_ERROR(BuildFilter());
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
  Sums tails, heads;
  torch::Tensor true_score, scores;
  std::vector<uint8_t> own_top;
  for (uint64_t lo = 0; lo < n; lo += 256) {
    const auto b = static_cast<int64_t>(std::min<uint64_t>(n, lo + 256) - lo);
    torch::Tensor hs = torch::from_blob(src.data() + lo, {b}, torch::kInt64);
    torch::Tensor ts = torch::from_blob(dst.data() + lo, {b}, torch::kInt64);
    torch::Tensor rs = torch::from_blob(rel.data() + lo, {b}, torch::kInt64);
    torch::Tensor h = nodes.index_select(0, hs), t = nodes.index_select(0, ts);
    const Known none(static_cast<size_t>(b));
    // Tails of (h, r, ?).
    SLUICE_RETURN_IF_ERROR(scorer.Score(h, rs, false, t, candidates, true_score, scores));
    tails.Add(RowRanks(true_score, scores, m.filtered ? KnownOf(true, src, rel, lo, b) : none, m,
                       src.data() + lo, own_top),
              own_top);
    // Heads of (?, r, t): the reciprocal relation's tails, or the head query.
    if (cfg_.model.reciprocal) {
      SLUICE_RETURN_IF_ERROR(scorer.Score(t, rs + static_cast<int64_t>(base_relations_), false, h,
                                          candidates, true_score, scores));
    } else {
      SLUICE_RETURN_IF_ERROR(scorer.Score(t, rs, true, h, candidates, true_score, scores));
    }
    heads.Add(RowRanks(true_score, scores, m.filtered ? KnownOf(false, dst, rel, lo, b) : none, m,
                       dst.data() + lo, own_top),
              own_top);
  }
  m.tails = tails.Metrics();
  m.heads = heads.Metrics();
  Sums both = tails;
  both.Add(heads);
  const LpSideMetrics all = both.Metrics();
  m.mrr = all.mrr, m.hits1 = all.hits1, m.hits3 = all.hits3, m.hits10 = all.hits10;
  m.own_top = all.own_top;
  return m;
}

}  // namespace sluice
