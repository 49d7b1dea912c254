#pragma once
// Link-prediction evaluation: every edge of a split ranked as (h, r, ?) and (?, r, t) against
// every node (or, past eval.exact_max_nodes, against a seeded sample of nodes), filtered (the
// other true edges of every split removed from the rankings) unless eval.filtered is false.
// MRR and Hits@1/3/10, ties counted at their mean rank, and how often a query's own entity
// (h of (h, r, ?), t of (?, r, t)) is ranked first above its true answer (ranked against every
// node only): the wrong answer that uniform training negatives almost never contain.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"
#include "storage/dataset.h"
#include "train/lp/lp_config.h"
#include "train/lp/lp_model.h"

namespace sluice {

// One side's ranks: tails of (h, r, ?) or heads of (?, r, t).
struct LpSideMetrics {
  double mrr = 0, hits1 = 0, hits3 = 0, hits10 = 0;
  double own_top = 0;  // share of queries whose own entity is ranked first (exact ranking only)
  std::string ToJson() const;
};

struct LpMetrics {
  uint64_t edges = 0;
  double mrr = 0, hits1 = 0, hits3 = 0, hits10 = 0;  // both sides together
  double own_top = 0;                                 // both sides (LpSideMetrics::own_top)
  LpSideMetrics tails, heads;                         // each side apart
  bool exact = true;     // ranked against every node (else against sampled nodes)
  bool filtered = true;  // other true edges removed from the rankings
  std::string ToString() const;
  std::string ToJson() const;
};

// What a ranking scores with: anchors [b, d] with relations `rel` [b] against their true
// answers `truth` [b, d] (row-wise: true_score [b]) and against `candidates` [c, d] (scores
// [b, c]); corrupt_head scores (?, r, anchor), else (anchor, r, ?). A `scores` that comes in
// as a contiguous float [b, c] tensor may be written in place (the ranker hands every block
// the same memory); otherwise it is replaced.
class LpScorer {
 public:
  virtual ~LpScorer() = default;
  virtual Status Score(const torch::Tensor& anchors, const torch::Tensor& rel, bool corrupt_head,
                       const torch::Tensor& truth, const torch::Tensor& candidates,
                       torch::Tensor& true_score, torch::Tensor& scores) = 0;
};

// The built-in decoders: one query per anchor (LpDecoder), scored against both.
class DecoderScorer : public LpScorer {
 public:
  DecoderScorer(const LpDecoder& decoder, torch::Tensor relations)
      : decoder_(decoder), relations_(std::move(relations)) {}
  Status Score(const torch::Tensor& anchors, const torch::Tensor& rel, bool corrupt_head,
               const torch::Tensor& truth, const torch::Tensor& candidates,
               torch::Tensor& true_score, torch::Tensor& scores) override;

 private:
  const LpDecoder& decoder_;
  torch::Tensor relations_;
};

// A user's model through Predict (sluice/model.h's ranking input): the true answers are
// scored as the first b candidates (the diagonal of that block), the candidates after them.
// The model's exception is an error naming what was ranked.
class ModelScorer : public LpScorer {
 public:
  explicit ModelScorer(Model& model) : model_(model) {}
  Status Score(const torch::Tensor& anchors, const torch::Tensor& rel, bool corrupt_head,
               const torch::Tensor& truth, const torch::Tensor& candidates,
               torch::Tensor& true_score, torch::Tensor& scores) override;

 private:
  Model& model_;
};

// One query's ranking against some of the candidates: how many score above its true answer
// and level with it, the highest score, and its own entity's score (-inf where that entity is
// not among them). Counts over disjoint candidates add up to the ranking against all of them.
struct LpQueryCount {
  int64_t greater = 0, equal = 0;
  float top = -std::numeric_limits<float>::infinity();
  float own = -std::numeric_limits<float>::infinity();
};

// Adds `other`'s counts of the same queries into `into` (counts of disjoint candidates).
void AddCounts(std::vector<LpQueryCount>& into, std::span<const LpQueryCount> other);

// The node embeddings a ranking reads: every node's (`ids` empty: row v is node v), or only
// the rows of `ids` (sorted, distinct: row i is node ids[i]), which is all a ranking against
// sampled nodes reads (LpRanker::NodesRead).
//
// An exact ranking across processes (`merge` set): each process scores every query against
// the nodes [cand_lo, cand_hi) (cand_lo a multiple of LpRanker::kTile, so every candidate is
// scored in the same tile as in one process), their rows from `read` (nodes cand_lo on),
// `rows` holds the ranked edges' ends (LpRanker::EndsRead), and `merge` adds every process's
// counts of each query (LpQueryCount) in place. Every process then holds the ranking of one
// process.
struct LpNodes {
  torch::Tensor rows;         // [n or ids.size(), d]
  std::vector<int64_t> ids;   // empty: every node
  uint64_t num_nodes = 0;     // of the graph
  uint64_t cand_lo = 0, cand_hi = 0;
  std::function<Status(std::vector<LpQueryCount>&)> merge;
  // An exact ranking without every candidate's row in memory (`read` set): `rows` holds the
  // ranked edges' ends (`ids`, LpRanker::EndsRead) and `read(first, n, out)` puts the rows of
  // nodes [first, first + n) in `out` [n, d], a chunk of candidates at a time.
  std::function<Status(uint64_t, uint64_t, torch::Tensor&)> read;
};

// What an evaluation holds, for the memory plan: `kept` from the first ranking on (the
// filter's known answers), `transient` while a ranking runs (the node rows it reads, one
// block of scores, the split's edges).
struct LpEvalBytes {
  uint64_t kept = 0, transient = 0;
};
struct LpEvalShape {
  uint64_t num_nodes = 0, dim = 0;
  uint64_t all_edges = 0;       // of every split (the filter)
  uint64_t largest_split = 0;   // edges of the largest split read at once
  uint64_t ranked_edges = 0;    // of the largest split evaluated (before eval.max_edges)
  // Across processes: the most nodes one process scores in an exact ranking (LpNodes), its
  // rows out of core (it reads those the others receive; in memory they are sent from the
  // table), and the world size (each process receives the others' counts).
  uint64_t scored_nodes = 0, own_rows = 0;
  int world = 1;
  bool encoder = false;         // every node's rows encoded: twice the table
  bool transe = false;          // TransE's distances take temporaries per scoring thread
  int threads = 1;              // scoring threads
};
LpEvalBytes EvalBytesFor(const LpConfig& config, const LpEvalShape& shape);

class LpRanker {
 public:
  // Queries scored at once: a block of scores is this many rows of candidates.
  static constexpr int64_t kQueries = 256;
  // Candidates scored by one product (DecoderScorer): a candidate's score is the same whatever
  // else is ranked, so a ranking split across processes at multiples of it scores as one does.
  static constexpr int64_t kTile = 1024;
  // Candidates scored against a block of queries at a time: the block of scores is kQueries by
  // kChunk floats (64 MiB) however many nodes there are. A multiple of kTile.
  static constexpr int64_t kChunk = 64 * kTile;

  // `dataset` must outlive the ranker.
  LpRanker(const Dataset& dataset, const LpConfig& config, uint64_t num_relations);
  // Whether a graph of `num_nodes` is ranked against every node (else against sampled ones).
  bool Exact(uint64_t num_nodes) const { return num_nodes <= cfg_.eval.exact_max_nodes; }
  // The nodes a ranking of `split` against sampled nodes reads: the heads and tails of the
  // edges it ranks and the sampled candidates, sorted and distinct.
  Result<std::vector<int64_t>> NodesRead(const std::string& split, uint64_t num_nodes) const;
  // The heads and tails of the edges a ranking of `split` ranks, sorted and distinct.
  Result<std::vector<int64_t>> EndsRead(const std::string& split) const;
  // Ranks split `split` with node embeddings `nodes`, scored by `scorer`.
  Result<LpMetrics> Rank(const std::string& split, LpScorer& scorer, const LpNodes& nodes);

 private:
  struct Sums {
    double rr = 0, h1 = 0, h3 = 0, h10 = 0;
    uint64_t ranked = 0, own_top = 0;
    void Add(double rank, bool own_first);
    void Add(const Sums& o);
    LpSideMetrics Metrics() const;
  };
  // The known answers of one side as (node * R + r, answer) pairs sorted in place: 16 bytes
  // an edge, nothing more while it is built (a hash map of vectors took about 90).
  using Answer = std::pair<uint64_t, int64_t>;
  struct AnswerIndex {
    std::vector<Answer> pairs;
    std::span<const Answer> Of(uint64_t key) const;
  };
  // A query's known true answers (empty: none).
  using Known = std::vector<std::span<const Answer>>;
  // The candidates sampled for a ranking against sampled nodes.
  std::vector<int64_t> SampledCandidates(uint64_t num_nodes) const;
  Status BuildFilter();
  // One side of a block of queries: anchors [b, d] with relations `rel` against their true
  // answers `truth`, the known answers and anchor ids of the block's queries, and where their
  // counts and true scores go.
  struct SideBlock {
    torch::Tensor anchors, rel, truth;
    bool corrupt_head = false;
    const Known* known = nullptr;
    const int64_t* anchor_ids = nullptr;
    LpQueryCount* counts = nullptr;
    float* truth_out = nullptr;
  };
  // The ranked edges (the first `n` of the split), their ends as rows of LpNodes::rows, and
  // each side's counts and true scores.
  struct Ranked {
    std::vector<int64_t> src, rel, dst, src_rows, dst_rows;
    uint64_t n = 0;
    std::vector<LpQueryCount> tails, heads;
    std::vector<float> tails_truth, heads_truth;
  };
  // Scores every query of both sides against `chunk`, the candidates of nodes c0 on (at most
  // kChunk of them; `first`: the first chunk), in `block` (kQueries by the chunk's floats), and
  // adds their counts.
  Status CountChunk(LpScorer& scorer, Ranked& e, const torch::Tensor& rows, const torch::Tensor& chunk,
                    uint64_t c0, bool first, const LpMetrics& m, torch::Tensor& block) const;
  // A bug's error where `nodes` cannot be ranked as `m` says.
  Status CheckNodes(const LpNodes& nodes, const LpMetrics& m) const;
  // Counts each of b queries' candidates against its true_score [b] in its row of scores [b, c]
  // (candidates' nodes c0 to c0 + c), added into counts[0, b); when filtered, the known true
  // answers' columns are set to -inf first (in place). The first chunk of candidates keeps the
  // true scores in truth[0, b); later chunks count against those (a user's model scores the
  // true answers again with every chunk). In an exact ranking the query's own entity is node
  // anchors[i]. Rows are counted in parallel, each by one task.
  void Count(const torch::Tensor& true_score, torch::Tensor& scores, const Known& known, const LpMetrics& m,
             const int64_t* anchors, uint64_t c0, bool first, LpQueryCount* counts, float* truth) const;
  // The ranks of queries counted against every candidate (ties at their mean rank), and
  // whether each query's own entity scored highest and above the true answer.
  static void Finish(const std::vector<LpQueryCount>& counts, const std::vector<float>& truth, const LpMetrics& m,
                     Sums& sums);
  // The known true answers of each query in edges [lo, lo + b): tails of (src, rel) or heads
  // of (dst, rel).
  Known KnownOf(bool tails, const std::vector<int64_t>& a, const std::vector<int64_t>& rel,
                uint64_t lo, int64_t b) const;

  const Dataset& dataset_;
  LpConfig cfg_;
  uint64_t base_relations_ = 0;
  // True tails of (h, r) and heads of (t, r), keyed node * R + r; built once.
  AnswerIndex tails_of_, heads_of_;
  bool filter_built_ = false;
};

}  // namespace sluice
