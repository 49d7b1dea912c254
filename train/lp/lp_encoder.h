#pragma once
// GraphSage in front of link prediction's decoder (model.encoder: graphsage; MariusGNN's link
// prediction): one layer, mean aggregator, node v encoded as W_self x_v + b + W_neigh mean(x_u)
// over its sampled neighbours u (sampler/link_neighbors.h), x the learnable node rows. Every
// node a step scores is encoded (heads, tails and negatives, each over its own neighbourhood),
// then the decoder scores the encodings as it scores rows without an encoder; gradients reach
// the rows of the seeds and of their neighbours through the encoder (the engine's use
// gradients), and the encoder's weights train with the relations (train.relation_optimizer).

#include <torch/torch.h>

#include <cstdint>

#include "sluice/model.h"

namespace sluice {

class SageLinkEncoder final : public Encoder {
 public:
  // Glorot-uniform weights drawn from a generator of its own seeded with `seed` (never the
  // global one), a zero bias.
  SageLinkEncoder(int64_t dim, uint64_t seed);

  // A step: tables[0].uses holds every distinct row of the step [rows, d], the seeds first
  // (sizes "seeds"), then the neighbours that are no seed; ids "nbr_offsets" [seeds + 1] and
  // "nbr" (indices into the rows) give each seed's neighbours, ids "uses" the decoder's uses
  // (heads, tails, negatives end to end) as indices into the seeds. Returns the decoder's
  // input: the seeds' encodings gathered in use order.
  ModelInput Encode(ModelInput input) override;
  // The encodings [s, d] of s nodes whose rows are `self` [s, d]: node i's neighbours are rows
  // nbr[offsets[i] .. offsets[i + 1]) of `rows` (no neighbours: the mean is zero).
  torch::Tensor Aggregate(const torch::Tensor& self, const torch::Tensor& rows, const torch::Tensor& offsets,
                          const torch::Tensor& nbr);
  uint64_t StepBytes() const override { return step_bytes_; }
  // Bytes a step of `rows` distinct rows and `neighbours` sampled neighbours takes (the plan).
  void set_step_bytes(uint64_t bytes) { step_bytes_ = bytes; }

 private:
  torch::nn::Linear self_{nullptr}, neigh_{nullptr};
  uint64_t step_bytes_ = 0;
};

}  // namespace sluice
