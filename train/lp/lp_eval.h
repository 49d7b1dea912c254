#pragma once
// Link-prediction evaluation: every edge of a split ranked as (h, r, ?) and (?, r, t) against
// every node (or, past eval.exact_max_nodes, against a seeded sample of nodes), filtered (the
// other true edges of every split removed from the rankings) unless eval.filtered is false.
// MRR and Hits@1/3/10, ties counted at their mean rank, and how often a query's own entity
// (h of (h, r, ?), t of (?, r, t)) is ranked first above its true answer (ranked against every
// node only): the wrong answer that uniform training negatives almost never contain.

#include <torch/torch.h>

#include <cstdint>
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

// The node embeddings a ranking reads: every node's (`ids` empty: row v is node v), or only
// the rows of `ids` (sorted, distinct: row i is node ids[i]), which is all a ranking against
// sampled nodes reads (LpRanker::NodesRead).
struct LpNodes {
  torch::Tensor rows;         // [n or ids.size(), d]
  std::vector<int64_t> ids;   // empty: every node
  uint64_t num_nodes = 0;     // of the graph
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
  bool all_rows = false;        // every node's row read even when ranked against sampled nodes
  bool encoder = false;         // every node's rows encoded: twice the table
  bool transe = false;          // TransE's distances take temporaries per scoring thread
  int threads = 1;              // scoring threads
};
LpEvalBytes EvalBytesFor(const LpConfig& config, const LpEvalShape& shape);

class LpRanker {
 public:
  // Queries scored at once: a block of scores is this many rows of candidates.
  static constexpr int64_t kQueries = 256;

  // `dataset` must outlive the ranker.
  LpRanker(const Dataset& dataset, const LpConfig& config, uint64_t num_relations);
  // Whether a graph of `num_nodes` is ranked against every node (else against sampled ones).
  bool Exact(uint64_t num_nodes) const { return num_nodes <= cfg_.eval.exact_max_nodes; }
  // The nodes a ranking of `split` against sampled nodes reads: the heads and tails of the
  // edges it ranks and the sampled candidates, sorted and distinct.
  Result<std::vector<int64_t>> NodesRead(const std::string& split, uint64_t num_nodes) const;
  // Ranks split `split` with node embeddings `nodes`, scored by `scorer`.
  Result<LpMetrics> Rank(const std::string& split, LpScorer& scorer, const LpNodes& nodes);

 private:
  struct Sums {
    double rr = 0, h1 = 0, h3 = 0, h10 = 0;
    uint64_t ranked = 0, own_top = 0;
    void Add(const std::vector<double>& ranks, const std::vector<uint8_t>& own_top);
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
  // The rank of each of b queries' true_score [b] among its row of scores [b, c], ties at
  // their mean rank; when filtered, the known true answers' columns are set to -inf first (in
  // place). Rows are ranked in parallel, each by one task, so ranks do not depend on threads.
  // In an exact ranking, own_top[i] says whether node anchors[i] (the query's own entity)
  // scored highest of the row and above the true answer.
  std::vector<double> RowRanks(const torch::Tensor& true_score, torch::Tensor& scores,
                               const Known& known, const LpMetrics& m, const int64_t* anchors,
                               std::vector<uint8_t>& own_top) const;
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
