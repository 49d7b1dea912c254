#include "train/lp/lp_encoder.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace sluice {

SageLinkEncoder::SageLinkEncoder(int64_t dim, uint64_t seed)
    : self_(register_module("self", torch::nn::Linear(torch::nn::LinearOptions(dim, dim).bias(true)))),
      neigh_(register_module("neigh", torch::nn::Linear(torch::nn::LinearOptions(dim, dim).bias(false)))) {
  torch::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(seed);
  const double bound = std::sqrt(6.0 / static_cast<double>(2 * dim));  // Glorot, fan_in = fan_out = dim
  self_->weight.uniform_(-bound, bound, generator);
  neigh_->weight.uniform_(-bound, bound, generator);
  self_->bias.zero_();
}

torch::Tensor SageLinkEncoder::Aggregate(const torch::Tensor& self, const torch::Tensor& rows,
                                         const torch::Tensor& offsets, const torch::Tensor& nbr) {
  const int64_t s = self.size(0);
  const torch::Tensor counts = offsets.slice(0, 1, s + 1) - offsets.slice(0, 0, s);
  // Each neighbour's row added into its node's sum in neighbour order: the same bits whatever
  // the thread count (index_add over the rows' dimension, one writer per node's row).
  const torch::Tensor owner = torch::repeat_interleave(counts);
  torch::Tensor sums = torch::zeros({s, self.size(1)}, self.options());
  sums = sums.index_add(0, owner, rows.index_select(0, nbr));
  const torch::Tensor mean = sums / counts.clamp_min(1).to(self.scalar_type()).unsqueeze(1);
  return self_->forward(self) + neigh_->forward(mean);
}

ModelInput SageLinkEncoder::Encode(ModelInput input) {
  TableInput& t = input.tables.at(0);
  const int64_t seeds = input.sizes.at("seeds");
  const torch::Tensor encoded =
      Aggregate(t.uses.slice(0, 0, seeds), t.uses, input.ids.at("nbr_offsets"), input.ids.at("nbr"));
  const torch::Tensor& uses = input.ids.at("uses");
  t.uses = encoded.index_select(0, uses);
  t.inverse = uses;
  t.rows = seeds;
  return input;
}

}  // namespace sluice
