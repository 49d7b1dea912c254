#include "train/lp/lp_eval.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include "common/json.h"
#include "sluice/check.h"
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

void LpRanker::Sums::Add(double rank, bool own_first) {
  own_top += own_first;
  rr += 1.0 / rank;
  h1 += rank <= 1;
  h3 += rank <= 3;
  h10 += rank <= 10;
  ++ranked;
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

std::span<const LpRanker::Answer> LpRanker::AnswerIndex::Of(uint64_t key) const {
  const auto lo = std::lower_bound(pairs.begin(), pairs.end(), key,
                                   [](const Answer& x, uint64_t k) { return x.first < k; });
  auto hi = lo;
  while (hi != pairs.end() && hi->first == key) ++hi;
  return {pairs.data() + (lo - pairs.begin()), static_cast<size_t>(hi - lo)};
}

// Known true edges: tails of (h, r) and heads of (r, t) over every split.
Status LpRanker::BuildFilter() {
  if (filter_built_) return Status::Ok();
  uint64_t total = 0;
  for (const auto& [split_name, count] : dataset_.manifest().edges) total += count;
  tails_of_.pairs.reserve(total), heads_of_.pairs.reserve(total);  // no growth, no copies
  for (const char* split_name : {"train", "valid", "test"}) {
    if (!dataset_.Has(std::string("edges.") + split_name + ".src")) continue;
    std::vector<int64_t> a, r, b;
    SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, split_name, a, r, b));
    for (size_t i = 0; i < a.size(); ++i) {
      const auto rel = static_cast<uint64_t>(r[i]);
      tails_of_.pairs.emplace_back(static_cast<uint64_t>(a[i]) * base_relations_ + rel, b[i]);
      heads_of_.pairs.emplace_back(static_cast<uint64_t>(b[i]) * base_relations_ + rel, a[i]);
    }
  }
  std::sort(tails_of_.pairs.begin(), tails_of_.pairs.end());
  std::sort(heads_of_.pairs.begin(), heads_of_.pairs.end());
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
  // The score matrix in blocks of 64 rows by LpRanker::kTile candidates on the TBB workers
  // (libtorch runs one thread each): every core scores, and a score comes from the same
  // product whatever the thread count, and whatever else is ranked, as long as the candidates
  // start at a multiple of the tile (a ranking split across processes). (16-row blocks kept the
  // products too thin: 28 s against 20 s on the graph of docs/link_prediction.md's evaluation
  // section.)
  const int64_t b = q.size(0);
  constexpr int64_t kRows = 64, kTile = LpRanker::kTile;
  const int64_t c = candidates.size(0);
  if (!scores.defined() || scores.dim() != 2 || scores.size(0) != b || scores.size(1) != c ||
      scores.scalar_type() != q.scalar_type() || !scores.is_contiguous()) {
    scores = torch::empty({b, c}, q.options());
  }
  const bool bilinear = decoder_.kind() != Decoder::kTransE;
  const torch::Tensor cand_t = candidates.t();
  const int64_t row_blocks = (b + kRows - 1) / kRows, tiles = (c + kTile - 1) / kTile;
  tbb::parallel_for(int64_t{0}, row_blocks * tiles, [&](int64_t task) {
    const int64_t lo = task / tiles * kRows, m = std::min(b, lo + kRows) - lo;
    const int64_t at = task % tiles * kTile, w = std::min(c, at + kTile) - at;
    torch::Tensor out = scores.narrow(0, lo, m).narrow(1, at, w);
    if (!bilinear) {
      out.copy_(decoder_.ScoreAll(q.narrow(0, lo, m), candidates.narrow(0, at, w)));
    } else if (c > 1) {
      torch::mm_out(out, q.narrow(0, lo, m), cand_t.narrow(1, at, w));
    } else {
      // The BLAS call libtorch makes depends on the output's strides: a block one candidate
      // wide scores into a wider one, as every other block does.
      torch::Tensor wide = torch::empty({m, 2}, q.options());
      torch::Tensor one = wide.narrow(1, 0, 1);
      torch::mm_out(one, q.narrow(0, lo, m), cand_t.narrow(1, at, w));
      out.copy_(one);
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

void LpRanker::Count(const torch::Tensor& true_score, torch::Tensor& scores, const Known& known,
                     const LpMetrics& m, const int64_t* anchors, uint64_t c0, bool first, LpQueryCount* counts,
                     float* truth) const {
  scores = scores.to(torch::kFloat32).contiguous();
  const torch::Tensor this_truth = true_score.to(torch::kFloat32).contiguous();
  const int64_t b = scores.size(0), c = scores.size(1);
  float* s = scores.data_ptr<float>();
  const float* t = this_truth.data_ptr<float>();
  const auto c_end = c0 + static_cast<uint64_t>(c);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, b, 4), [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t i = r.begin(); i < r.end(); ++i) {
      float* row = s + i * c;
      if (m.filtered) {
        for (const Answer& x : known[i]) {
          const auto v = static_cast<uint64_t>(x.second);
          if (v >= c0 && v < c_end) row[v - c0] = -std::numeric_limits<float>::infinity();
        }
      }
      if (first) truth[i] = t[i];  // later chunks count against the first chunk's true score
      const float ti = truth[i];
      LpQueryCount& k = counts[i];  // added to: the counts of the chunks before
      for (int64_t j = 0; j < c; ++j) {
        k.greater += row[j] > ti;
        k.equal += row[j] == ti;
        k.top = std::max(k.top, row[j]);
      }
      // In an exact ranking the candidates are nodes c0 on: the anchor's column is its id less c0.
      const auto own = static_cast<uint64_t>(anchors[i]);
      if (m.exact && own >= c0 && own < c_end) k.own = row[own - c0];
    }
  });
}

void AddCounts(std::vector<LpQueryCount>& into, std::span<const LpQueryCount> other) {
  SLUICE_CHECK(into.size() == other.size(), "%zu counts added to %zu", other.size(), into.size());
  for (size_t i = 0; i < into.size(); ++i) {
    LpQueryCount& k = into[i];
    k.greater += other[i].greater, k.equal += other[i].equal;
    k.top = std::max(k.top, other[i].top), k.own = std::max(k.own, other[i].own);
  }
}

void LpRanker::Finish(const std::vector<LpQueryCount>& counts, const std::vector<float>& truth,
                      const LpMetrics& m, Sums& sums) {
  // In an exact unfiltered ranking the true node ties with itself; filtered, it was removed.
  const bool self_tie = m.exact && !m.filtered;
  for (size_t i = 0; i < counts.size(); ++i) {
    const LpQueryCount& k = counts[i];
    const int64_t equal = k.equal - (self_tie ? 1 : 0);
    const double rank = 1.0 + static_cast<double>(k.greater) + static_cast<double>(std::max<int64_t>(equal, 0)) / 2.0;
    sums.Add(rank, m.exact && k.own > truth[i] && k.own == k.top);
  }
}

std::vector<int64_t> LpRanker::SampledCandidates(uint64_t num_nodes) const {
  const Key k = Key(cfg_.train.seed).With(0xE7A1);
  std::vector<int64_t> ids(static_cast<size_t>(cfg_.eval.sampled_negatives));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(k.Below(i, num_nodes));
  return ids;
}

Result<std::vector<int64_t>> LpRanker::EndsRead(const std::string& split) const {
  std::vector<int64_t> src, rel, dst;
  SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, split, src, rel, dst));
  const uint64_t n = cfg_.eval.max_edges > 0 ? std::min<uint64_t>(src.size(), cfg_.eval.max_edges) : src.size();
  std::vector<int64_t> ids(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(n));
  ids.insert(ids.end(), dst.begin(), dst.begin() + static_cast<std::ptrdiff_t>(n));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Result<std::vector<int64_t>> LpRanker::NodesRead(const std::string& split, uint64_t num_nodes) const {
  SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> ids, EndsRead(split));
  const std::vector<int64_t> sampled = SampledCandidates(num_nodes);
  ids.insert(ids.end(), sampled.begin(), sampled.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

Status LpRanker::CountChunk(LpScorer& scorer, Ranked& e, const torch::Tensor& rows, const torch::Tensor& chunk,
                            uint64_t c0, bool first, const LpMetrics& m, torch::Tensor& block) const {
  const int64_t w = chunk.size(0);
  torch::Tensor true_score;
  const auto count = [&](const SideBlock& side, int64_t b) -> Status {
    torch::Tensor scores = block.narrow(0, 0, b * w).view({b, w});
    SLUICE_RETURN_IF_ERROR(
        scorer.Score(side.anchors, side.rel, side.corrupt_head, side.truth, chunk, true_score, scores));
    Count(true_score, scores, *side.known, m, side.anchor_ids, c0, first, side.counts, side.truth_out);
    return Status::Ok();
  };
  for (uint64_t lo = 0; lo < e.n; lo += kQueries) {
    const auto b = static_cast<int64_t>(std::min<uint64_t>(e.n, lo + kQueries) - lo);
    torch::Tensor hs = torch::from_blob(e.src_rows.data() + lo, {b}, torch::kInt64);
    torch::Tensor ts = torch::from_blob(e.dst_rows.data() + lo, {b}, torch::kInt64);
    torch::Tensor rs = torch::from_blob(e.rel.data() + lo, {b}, torch::kInt64);
    torch::Tensor h = rows.index_select(0, hs), t = rows.index_select(0, ts);
    const Known none(static_cast<size_t>(b));
    const Known known_tails = m.filtered ? KnownOf(true, e.src, e.rel, lo, b) : none;
    const Known known_heads = m.filtered ? KnownOf(false, e.dst, e.rel, lo, b) : none;
    // Tails of (h, r, ?); heads of (?, r, t): the reciprocal relation's tails, or the head query.
    SLUICE_RETURN_IF_ERROR(count({h, rs, t, false, &known_tails, e.src.data() + lo, e.tails.data() + lo,
                                  e.tails_truth.data() + lo}, b));
    const bool reciprocal = cfg_.model.reciprocal;
    SLUICE_RETURN_IF_ERROR(count({t, reciprocal ? rs + static_cast<int64_t>(base_relations_) : rs, h, !reciprocal,
                                  &known_heads, e.dst.data() + lo, e.heads.data() + lo, e.heads_truth.data() + lo}, b));
  }
  return Status::Ok();
}

Status LpRanker::CheckNodes(const LpNodes& nodes, const LpMetrics& m) const {
  if (nodes.merge) {  // split across processes
    const auto tiled = [&](uint64_t v) { return v % kTile == 0 || v == nodes.num_nodes; };
    const bool fits = m.exact && (tiled(nodes.cand_lo) || nodes.cand_lo == nodes.cand_hi) && tiled(nodes.cand_hi) &&
                      nodes.cand_lo <= nodes.cand_hi &&
                      nodes.cand_hi <= nodes.num_nodes && nodes.read;
    if (!fits) {
      return FailedPrecondition("a ranking across processes scores nodes " + std::to_string(nodes.cand_lo) + " to " +
                                std::to_string(nodes.cand_hi) + " of " + std::to_string(nodes.num_nodes) +
                                ", not whole tiles of an exact ranking (a bug)");
    }
  } else if (m.exact && !nodes.ids.empty() && !nodes.read) {
    return InvalidArgument("an exact ranking reads every node's row, not " + std::to_string(nodes.ids.size()) + " of them");
  }
  return Status::Ok();
}

Result<LpMetrics> LpRanker::Rank(const std::string& split, LpScorer& scorer, const LpNodes& nodes) {
  torch::NoGradGuard no_grad;
  Ranked e;
  SLUICE_RETURN_IF_ERROR(LoadEdges(dataset_, split, e.src, e.rel, e.dst));
  LpMetrics m;
  const uint64_t num_nodes = nodes.num_nodes;
  m.exact = Exact(num_nodes);
  SLUICE_RETURN_IF_ERROR(CheckNodes(nodes, m));
  m.filtered = cfg_.eval.filtered && m.exact;
  if (m.filtered) SLUICE_RETURN_IF_ERROR(BuildFilter());
  e.n = cfg_.eval.max_edges > 0 ? std::min<uint64_t>(e.src.size(), cfg_.eval.max_edges) : e.src.size();
  m.edges = e.n;
  // Node ids as rows of nodes.rows: themselves, or their place among nodes.ids.
  const auto rows_of = [&](const std::vector<int64_t>& ids, uint64_t count) -> Result<std::vector<int64_t>> {
    std::vector<int64_t> out(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(count));
    if (nodes.ids.empty()) return out;
    for (int64_t& v : out) {
      const auto it = std::lower_bound(nodes.ids.begin(), nodes.ids.end(), v);
      if (it == nodes.ids.end() || *it != v) return InvalidArgument("node " + std::to_string(v) + " was not read for the ranking");
      v = it - nodes.ids.begin();
    }
    return out;
  };
  SLUICE_ASSIGN_OR_RETURN(e.src_rows, rows_of(e.src, e.n));
  SLUICE_ASSIGN_OR_RETURN(e.dst_rows, rows_of(e.dst, e.n));
  // The candidates: every node's row, or this process's share (merge: nodes cand_lo on), read a
  // chunk at a time (read) or in memory; or the sampled nodes'.
  torch::Tensor candidates = nodes.rows;
  const uint64_t c0 = nodes.merge ? nodes.cand_lo : 0;
  const bool reading = m.exact && nodes.read;
  int64_t c = !reading ? candidates.size(0)
                       : static_cast<int64_t>(nodes.merge ? nodes.cand_hi - nodes.cand_lo : num_nodes);
  if (!m.exact) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<int64_t> ids, rows_of(SampledCandidates(num_nodes), cfg_.eval.sampled_negatives));
    candidates = nodes.rows.index_select(0, torch::tensor(ids));
    c = candidates.size(0);
  }
  // Each side's queries counted against the candidates, a chunk of candidates at a time, then
  // ranked once every chunk's and every process's counts are in.
  e.tails.resize(e.n), e.heads.resize(e.n), e.tails_truth.resize(e.n), e.heads_truth.resize(e.n);
  // One block of scores for every query block and chunk (a fresh one each time left the heap's
  // free blocks too fragmented to reuse: the resident set grew by two blocks per query block).
  torch::Tensor block = torch::empty({std::min<int64_t>(kQueries, static_cast<int64_t>(e.n)) * std::min(kChunk, c)});
  torch::Tensor chunk;
  // A chunk at a time, at least once: a process with no candidates still scores the truths.
  for (int64_t at = 0; at == 0 || at < c; at += kChunk) {
    const int64_t w = std::min(kChunk, c - at);
    if (reading) {
      SLUICE_RETURN_IF_ERROR(nodes.read(c0 + static_cast<uint64_t>(at), static_cast<uint64_t>(w), chunk));
    } else {
      chunk = candidates.narrow(0, at, w);
    }
    SLUICE_RETURN_IF_ERROR(CountChunk(scorer, e, nodes.rows, chunk, c0 + static_cast<uint64_t>(at), at == 0, m, block));
  }
  if (nodes.merge) {
    SLUICE_RETURN_IF_ERROR(nodes.merge(e.tails));
    SLUICE_RETURN_IF_ERROR(nodes.merge(e.heads));
  }
  Sums tail_sums, head_sums;
  Finish(e.tails, e.tails_truth, m, tail_sums);
  Finish(e.heads, e.heads_truth, m, head_sums);
  m.tails = tail_sums.Metrics();
  m.heads = head_sums.Metrics();
  Sums both = tail_sums;
  both.Add(head_sums);
  const LpSideMetrics all = both.Metrics();
  m.mrr = all.mrr, m.hits1 = all.hits1, m.hits3 = all.hits3, m.hits10 = all.hits10;
  m.own_top = all.own_top;
  return m;
}

LpEvalBytes EvalBytesFor(const LpConfig& config, const LpEvalShape& shape) {
  LpEvalBytes e;
  const bool exact = shape.num_nodes <= config.eval.exact_max_nodes;
  const bool filtered = exact && config.eval.filtered;
  const uint64_t ranked = config.eval.max_edges > 0 ? std::min(shape.ranked_edges, config.eval.max_edges)
                                                    : shape.ranked_edges;
  const uint64_t row = shape.dim * 4;
  const uint64_t candidates = exact ? shape.num_nodes : static_cast<uint64_t>(config.eval.sampled_negatives);
  if (filtered) e.kept = 2 * sizeof(std::pair<uint64_t, int64_t>) * shape.all_edges;  // both sides' answers
  // Across processes, the nodes this process scores: its share of an exact ranking (LpNodes).
  const bool split_up = shape.world > 1;
  const uint64_t scored = split_up && exact ? shape.scored_nodes : candidates;
  // The rows read: every node's twice when encoded (the table and its encoding), else the ranked
  // edges' ends and a chunk of nodes at a time, or the sampled candidates (their ids, their rows,
  // the candidates' copy).
  // Across processes: the ends and the borrowed nodes (at most a tile: LpTask), then a chunk of
  // its own at a time, or the sampled candidates; while they are gathered, before the ranking,
  // also the floats received, the rows this process read to send (out of core: the others'
  // ends and borrowed nodes it owns) and its sends.
  uint64_t rows = 0, gathering = 0;
  if (split_up) {
    const uint64_t got = 2 * ranked + (exact ? LpRanker::kTile : candidates);
    const uint64_t sent = std::min(shape.own_rows, 2 * ranked + uint64_t(shape.world) * LpRanker::kTile);
    rows = got * (row + 8) + (exact ? std::min<uint64_t>(scored, LpRanker::kChunk) * 3 * row : candidates * row);
    // Its sends: the ends it owns (at most its share of the nodes) and a tile, to each other.
    gathering = got * row + sent * (row + 8) +
                uint64_t(shape.world - 1) * (std::min(2 * ranked, scored) + LpRanker::kTile) * row;
  } else if (shape.encoder) {
    rows = shape.num_nodes * row * 2;
  } else if (exact) {  // the ends, then a chunk of nodes at a time (its rows as read, with their state)
    rows = 2 * ranked * (row + 8) + std::min<uint64_t>(shape.num_nodes, LpRanker::kChunk) * 3 * row;
  } else {
    rows = (2 * ranked + candidates) * (row + 8) + candidates * row;
  }
  const uint64_t block = std::min<uint64_t>(LpRanker::kQueries, std::max<uint64_t>(ranked, 1)) *
                         std::min<uint64_t>(scored, LpRanker::kChunk) * 4;  // a chunk of candidates at a time
  // TransE's distance: the product, the squared norms' sum, its clamp and root, 64 queries by a
  // tile a thread at a time.
  const uint64_t tile = std::min<uint64_t>(scored, LpRanker::kTile);
  const uint64_t transe = shape.transe ? uint64_t(std::max(shape.threads, 1)) * 4 * 64 * tile * 4 : 0;
  // The ranked split's edges and their rows; building the filter reads one split at a time.
  const uint64_t edges = 24 * shape.ranked_edges + (filtered ? 24 * shape.largest_split : 0) + 16 * ranked;
  const uint64_t queries = 6 * LpRanker::kQueries * row;  // anchors, truths, queries
  // Each side's counts and true scores; across processes one side's counts sent to and
  // received from each of the others.
  const uint64_t counts = 2 * ranked * (sizeof(LpQueryCount) + 4) +
                          (split_up ? 2 * uint64_t(shape.world - 1) * ranked * sizeof(LpQueryCount) : 0);
  e.transient = rows + edges + std::max(gathering, block + transe + queries + counts);
  return e;
}

}  // namespace sluice
