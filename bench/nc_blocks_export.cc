// nc_blocks_export: the sampled blocks of a node-classification pass exactly as sluice's training
// (or sampled evaluation) draws them, one file a step, for a reference implementation to train on
// the same samples (bench/pyg_reference.py, when PyTorch Geometric cannot sample on a machine).
//
//   nc_blocks_export --dataset DIR --out DIR [--split train] [--fanouts 15,10,5] [--batch 1024]
//                    [--seed 1] [--epoch 0] [--steps 0]
//
// Training (--split train) orders the split's nodes by the epoch's permutation and samples step
// t with key (seed, epoch, t), as NcTask::TrainEpoch does; another split is taken in file order
// with key (seed, 0, t), as sampled evaluation does (pass eval.seed as --seed).
//
// step_NNNNN.bin holds little-endian int64 words: the block count B; per block, outermost first,
// (num_src, num_dst, offsets length, sources length); the seed count and the node count; then the
// seeds, the nodes (every node of the sample, the seeds first), and per block its offsets and
// sources (local indices into the nodes).

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/fanouts.h"
#include "sampler/batch_order.h"
#include "sampler/csr_graph.h"
#include "sampler/khop_sampler.h"
#include "storage/dataset.h"

namespace {

void Append(std::vector<int64_t>& out, const void* data, size_t n) {
  const auto* p = static_cast<const int64_t*>(data);
  out.insert(out.end(), p, p + n);
}

std::vector<int64_t> StepWords(const sluice::SampledSubgraph& s) {
  std::vector<int64_t> w{static_cast<int64_t>(s.blocks.size())};
  for (size_t l = s.blocks.size(); l-- > 0;) {
    const sluice::SampledBlock& b = s.blocks[l];
    w.insert(w.end(), {static_cast<int64_t>(b.num_src), static_cast<int64_t>(b.num_dst),
                       static_cast<int64_t>(b.offsets.size()), static_cast<int64_t>(b.src_local.size())});
  }
  w.push_back(static_cast<int64_t>(s.layers.front().size()));
  w.push_back(static_cast<int64_t>(s.layers.back().size()));
  Append(w, s.layers.front().data(), s.layers.front().size());
  Append(w, s.layers.back().data(), s.layers.back().size());
  for (size_t l = s.blocks.size(); l-- > 0;) {
    Append(w, s.blocks[l].offsets.data(), s.blocks[l].offsets.size());
    Append(w, s.blocks[l].src_local.data(), s.blocks[l].src_local.size());
  }
  return w;
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "nc_blocks_export: error: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataset_dir, out_dir, split = "train", fanouts = "15,10,5";
  uint64_t batch = 1024, seed = 1, epoch = 0, max_steps = 0;
  CLI::App app{"export a node-classification pass's sampled blocks"};
  app.add_option("--dataset", dataset_dir, "a node-classification dataset")->required();
  app.add_option("--out", out_dir, "output directory")->required();
  app.add_option("--split", split, "train, valid or test");
  app.add_option("--fanouts", fanouts, "comma-separated fanouts, outermost hop last (-1: every neighbour)");
  app.add_option("--batch", batch, "seeds per step");
  app.add_option("--seed", seed, "train.seed (or eval.seed for another split)");
  app.add_option("--epoch", epoch, "the training epoch (0: the first)");
  app.add_option("--steps", max_steps, "steps to export (0: the whole pass)");
  CLI11_PARSE(app, argc, argv);
  sluice::KHopOptions options;
  options.fanouts = sluice::ParseFanouts(fanouts);
  auto dataset = sluice::Dataset::Open(dataset_dir);
  if (!dataset.ok()) return Fail(dataset.status().message());
  auto graph = sluice::CsrGraph::Load(*dataset, "train", sluice::Direction::kIn);
  if (!graph.ok()) return Fail(graph.status().message());
  auto nodes = dataset->ReadInt64("nodes." + split);
  if (!nodes.ok()) return Fail(nodes.status().message());
  std::vector<int64_t> order(nodes->size());
  if (split == "train") {
    const std::vector<int64_t> perm = sluice::EpochPermutation(nodes->size(), seed, epoch);
    for (size_t i = 0; i < perm.size(); ++i) order[i] = (*nodes)[static_cast<size_t>(perm[i])];
  } else {
    order = *nodes;
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Fail(out_dir + ": " + ec.message());
  sluice::KHopSampler sampler(*graph, options);
  uint64_t steps = (order.size() + batch - 1) / batch;
  if (max_steps != 0 && max_steps < steps) steps = max_steps;
  uint64_t edges = 0;
  for (uint64_t t = 0; t < steps; ++t) {
    const uint64_t begin = t * batch, n = std::min<uint64_t>(batch, order.size() - begin);
    const sluice::SampledSubgraph s =
        sampler.Sample({order.data() + begin, n}, {seed, split == "train" ? epoch : 0, t}, options);
    for (const sluice::SampledBlock& b : s.blocks) edges += b.src_local.size();
    const std::vector<int64_t> words = StepWords(s);
    char name[32];
    std::snprintf(name, sizeof name, "/step_%05llu.bin", static_cast<unsigned long long>(t));
    std::ofstream f(out_dir + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(words.data()), static_cast<std::streamsize>(words.size() * 8));
    if (!f) return Fail(out_dir + name + ": write failed");
  }
  std::printf("{\"steps\": %llu, \"edges_per_step\": %.0f}\n", static_cast<unsigned long long>(steps),
              steps ? static_cast<double>(edges) / static_cast<double>(steps) : 0.0);
  return 0;
}
