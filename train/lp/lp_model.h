#pragma once
// Link-prediction decoders and losses (libtorch). A decoder scores (head, relation, tail):
//   distmult: <h, r, t>            complex: Re<h, r, conj(t)> (first half real, second imag)
//   transe:   -||h + r - t||_2     dot:     <h, t> (relations ignored)
// Each is written as a query built from two of the three embeddings, scored against the third,
// so corrupting a side is one matrix product against the negatives.

#include <torch/torch.h>

#include <string>
#include <vector>

#include "train/lp/lp_config.h"
#include "train/model.h"

namespace sluice {

class LpDecoder {
 public:
  explicit LpDecoder(Decoder kind) : kind_(kind) {}
  Decoder kind() const { return kind_; }
  // Query scoring candidate tails of (h, r, ?).
  torch::Tensor TailQuery(const torch::Tensor& h, const torch::Tensor& r) const;
  // Query scoring candidate heads of (?, r, t).
  torch::Tensor HeadQuery(const torch::Tensor& r, const torch::Tensor& t) const;
  // Row-wise scores of query i against candidate x[i].
  torch::Tensor Score(const torch::Tensor& q, const torch::Tensor& x) const;
  // Scores of every query against every candidate: [queries, candidates].
  torch::Tensor ScoreAll(const torch::Tensor& q, const torch::Tensor& candidates) const;
  // The same per chunk, all chunks at once: q [C, b, d] against candidates [C, n, d] -> [C, b, n].
  torch::Tensor ScoreChunks(const torch::Tensor& q, const torch::Tensor& candidates) const;
  // Scores of (h[i], r, t[i]) for every relation r (rows of `relations`): [queries, relations].
  // Dot has no relations (not called for it).
  torch::Tensor ScoreRelations(const torch::Tensor& h, const torch::Tensor& t,
                               const torch::Tensor& relations) const;

 private:
  Decoder kind_;
};

// The rows a step scores, gathered: per query a head, relation and tail; per chunk c the shared
// negatives tail_neg[c] (and head_neg[c] unless only tails are corrupted). Queries are split
// into `chunks` contiguous runs: chunk c is queries [q*c/C, q*(c+1)/C).
struct LpBatch {
  torch::Tensor h, r, t;            // [q, d]
  torch::Tensor tail_neg, head_neg; // [C, n, d]; head_neg undefined: tails only
};
struct LpGrads {
  torch::Tensor h, r, t, tail_neg, head_neg;  // same shapes as the batch
  double loss = 0;                             // the loss, summed over queries and sides
};

// Loss and gradients of a step for the bilinear decoders (distmult, complex, dot), computed
// directly, no autograd graph: per side and chunk one matrix product forward and two backward.
// The softmax loss runs fused, one task per chunk (per side and chunk for complex and dot), on
// the TBB workers; results do not depend on the thread count.
// `scale` multiplies the loss (1 / number of scored queries). TransE uses autograd instead.
LpGrads BilinearLossAndGrads(Decoder decoder, LossKind loss, double margin,
                             const LpBatch& batch, double scale);

// The same with the quality options: label smoothing (softmax), dropout masks on each side's
// query inputs (the tail query's h and r, the head query's t and r; 0 or 1 / (1 - p)) and on
// the candidates (`*_candidate_mask` shaped as the side's negatives, `*_target_mask` [q, d] as
// its true candidates) and 1vsAll (tail_col defined: one chunk of negatives, every node
// of the step's partitions, shared by all queries; tail_col[i] / head_col[i] the column of
// query i's true candidate, left out of its softmax). 1vsAll's score matrix [queries,
// candidates] lives in `scores` (grown as needed, reused between steps). own_loop defined
// (bool [q], sampled softmax only): each side also scores its query's own entity (the head of
// a tail query, the tail of a head query, unmasked) as one more negative, except in the rows
// own_loop marks (self-loops, where it is the true candidate).
struct BilinearOptions {
  LossKind loss = LossKind::kSoftmax;
  double margin = 1.0;
  double scale = 1.0;
  float smoothing = 0.0f;
  torch::Tensor tail_col, head_col;
  torch::Tensor tail_entity_mask, tail_relation_mask, head_entity_mask, head_relation_mask;
  torch::Tensor tail_candidate_mask, tail_target_mask, head_candidate_mask, head_target_mask;
  torch::Tensor own_loop;
  std::vector<float>* scores = nullptr;
  bool general() const {
    return smoothing > 0 || tail_col.defined() || tail_entity_mask.defined() ||
           tail_relation_mask.defined() || tail_candidate_mask.defined() || own_loop.defined();
  }
};
LpGrads BilinearLossAndGrads(Decoder decoder, const LpBatch& batch, const BilinearOptions& options);

// Tests: false makes the softmax path multiply through torch::mm_out, the fallback for a
// libtorch without a Fortran BLAS symbol, instead of calling sgemm_ directly.
void UseDirectBlasForTesting(bool enabled);

// Sum over queries of the loss of positive scores `pos` [b] against negatives `neg` [b, n].
// Softmax only: `smoothing` as SoftmaxTargets; `excluded` (bool [b, n], or undefined) marks the
// negatives a row leaves out (1vsAll: its true candidate).
torch::Tensor LpLoss(LossKind kind, double margin, const torch::Tensor& pos,
                     const torch::Tensor& neg, double smoothing = 0.0,
                     const torch::Tensor& excluded = {});

// Relation prediction (train.relation_prediction): the cross-entropy of each query's relation
// `ids[i]` among every relation, scored with its own head and tail, summed over queries. With
// reciprocal relations (rows [base, 2 base) invert rows [0, base)) a query's relation competes
// with those of its own direction only. Differentiable in h, t and `relations`.
torch::Tensor RelationPredictionLoss(const LpDecoder& decoder, const torch::Tensor& h,
                                     const torch::Tensor& t, const torch::Tensor& relations,
                                     const torch::Tensor& ids, bool reciprocal);

// Adds w * |x|^2 (l2, n3 false) or w * |x|^3 (n3) summed over the rows of x [n, d] to a step's
// loss: its gradient is added to gx [n, d] in place (made contiguous first), in one pass over
// blocks of rows on the TBB workers; returns the penalty, summed per block of 256 rows and then
// over blocks in order, so the bits do not depend on the thread count.
double AddRowPenalty(bool n3, double w, const torch::Tensor& x, torch::Tensor& gx);

// The link-prediction model behind the model seam (train/model.h): relation embeddings (its
// parameter; they start as a pure function of the seed) and a decoder over the node rows.
//
// Its input: table 0's uses are the step's heads [q], tails [q], tail negatives [C * n] and,
// unless only tails are corrupted, head negatives [C * n], laid end to end; ids["relation"]
// holds each query's relation; sizes "queries", "chunks", "per_chunk", "head_negatives".
// 1vsAll (train.scoring: all): C = 1, the negatives are every candidate, and ids["tail_col"]
// (ids["head_col"]) give each query's true candidate's column among them.
// train.own_negative (sampled softmax): each query also scores its own entity as a negative
// unless it is the true candidate (a self-loop, found as equal head and tail rows).
// The loss is the mean over scored queries (plus the L2/N3 penalty of the rows a step uses,
// plus train.relation_prediction times the mean relation-prediction loss).
// Bilinear decoders (distmult, complex, dot) have a fused path (BilinearLossAndGrads); transe,
// or any decoder with set_fused(false), goes through autograd.
class LinkModel : public Model {
 public:
  // `num_nodes`: the most candidates a 1vsAll step scores (StepBytes).
  LinkModel(const LpConfig& config, uint64_t num_relations, uint64_t num_nodes = 0);

  torch::Tensor& relations() { return relations_; }
  const LpDecoder& decoder() const { return decoder_; }
  bool fused() const { return fused_ && config_.model.decoder != Decoder::kTransE; }
  void set_fused(bool fused) { fused_ = fused; }

  torch::Tensor Loss(const ModelInput& input) override;
  bool FusedLoss(const ModelInput& input, FusedOutput& out) override;
  // The score matrices dominate: about four [queries x negatives] float tensors per corrupted
  // side, and sixteen copies of the query rows.
  uint64_t StepBytes() const override;

 private:
  struct Views {
    int64_t q = 0, chunks = 0, per_chunk = 0;
    LpBatch batch;  // h, t, tail_neg, head_neg: views of the uses; r undefined
    torch::Tensor relation_ids;
    torch::Tensor tail_col, head_col;  // 1vsAll (ids "tail_col", "head_col")
  };
  // Dropout masks [q, d] of the queries' inputs, the candidates' (shaped as the negatives) and
  // the true candidates' [q, d] (undefined: none).
  struct Masks {
    torch::Tensor tail_entity, tail_relation, head_entity, head_relation;
    torch::Tensor tail_candidate, tail_target, head_candidate, head_target;
  };
  Views Split(const ModelInput& input) const;
  Masks DropoutMasks(const ModelInput& input, const Views& v) const;
  // `own`: each side's own-entity scores [q] (train.own_negative; undefined: none), `loop` the
  // self-loops that leave them out.
  torch::Tensor ChunkLosses(const Views& v, const torch::Tensor& pos, const torch::Tensor& head_pos,
                            const torch::Tensor& tq, const torch::Tensor& hq,
                            const torch::Tensor (&own)[2], const torch::Tensor& loop) const;
  // train.own_negative applies to this step: the self-loops (bool [q]); undefined otherwise.
  torch::Tensor OwnLoops(const Views& v) const;
  double Scale(int64_t queries) const;
  // train.relation_prediction on the fused path: adds its gradients to g's heads and tails and
  // to `rel_grad`; returns its share of the loss.
  double AddRelationPrediction(const Views& v, double scale, LpGrads& g, torch::Tensor& rel_grad) const;

  LpConfig config_;
  LpDecoder decoder_;
  torch::Tensor relations_;
  bool fused_ = true;
  uint64_t num_nodes_ = 0;
  std::vector<float> scores_;  // 1vsAll's score matrix, reused between steps
};

}  // namespace sluice
