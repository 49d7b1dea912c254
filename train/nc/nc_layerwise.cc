// Layer-wise inference (see nc_task_impl.h): every node's layer-1 output from every
// in-neighbour's features, then layer 2 from those, and so on. Each pass samples one hop with
// every neighbour for a batch of destination nodes, reads its sources' rows through the
// pipeline (the feature cache, or a cache over the previous layer's row file in the run
// directory, in the same arena), and writes the batch's outputs in node order; the last layer
// keeps only the wanted nodes' logits. Memory is the budget's whatever the graph's size (the
// first layer's cache index goes while the later layers' cache is in the arena); in memory the
// outputs stay in RAM.
#include <filesystem>
#include <numeric>

#include "common/units.h"
#include "train/model_step.h"
#include "train/nc/nc_task_impl.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

}  // namespace

void NcTask::ReleaseFeatureCache() {
  if (!cache_) return;
  const RowCacheStats cs = cache_->stats();
  RowCacheStats& e = earlier_cache_stats_;
  e.steps += cs.steps, e.accesses += cs.accesses, e.hits += cs.hits, e.loads += cs.loads;
  e.drained_steps += cs.drained_steps;
  cache_.reset();
}

void NcTask::ResetFeatureCache() {
  ReleaseFeatureCache();
  cache_ = std::make_unique<RowCache>(cache_options_);  // its arena was reused
}

Status NcTask::LayerPass(int l, const RowSource& in, MemoryRows* out_memory, RowFile* out_file,
                         const NodeLogits* logits) {
  std::vector<int64_t> all(num_nodes_);
  std::iota(all.begin(), all.end(), int64_t{0});
  Pass pass{&all, sampler_.get(), &one_hop_options_, cfg_.eval.seed, 0, 0, static_cast<uint64_t>(cfg_.eval.batch)};
  FitEvalPass(pass, in.cache);
  // Across processes the first layer reads learnable embeddings: each step's rows this rank owns
  // through its cache, the others from their owners. Each rank computes its part of the steps.
  if (l == 0 && sharded_ != nullptr && across_processes()) {
    pass.own_keys = true;
    pass.own_begin = own_begin_, pass.own_end = own_end_;
  }
  std::vector<std::pair<uint64_t, int>> rounds;
  SplitEvalPass(pass, rounds);
  std::unique_ptr<IoSession> io;
  if (out_file) {  // a step's outputs are one run of rows: a few requests, a few slots
    IoConfig o = cfg_.io;
    o.queue_depth = std::min(o.EffectiveQueueDepth(), 4);
    SLUICE_ASSIGN_OR_RETURN(io, IoSession::Create(o));
  }
  auto p = MakePipeline(pass, in);
  p->Start();
  const int64_t width = gnn_->OutputWidth(l);
  std::vector<uint64_t> ids;
  const auto compute = [&](uint64_t, const ModelInput& input, const SampledSubgraph& sub) -> Status {
    try {
      // On a device run the layer computes there (its input moved over, its rows back).
      const torch::Device device = ModelDevice(*gnn_);
      const ModelInput on = device.is_cpu() ? input : InputOn(input, device);
      const torch::Tensor out =
          gnn_->Apply(l, on.tables[0].uses, on.blocks[0], on.ids.at("nodes"), on).to(torch::kCPU).contiguous();
      const std::vector<int64_t>& dst = sub.layers.front();  // this step's nodes, in order
      const auto* rows = reinterpret_cast<const std::byte*>(out.data_ptr<float>());
      const size_t row_bytes = static_cast<size_t>(width) * 4;
      if (logits) {
        logits->Keep(dst.front(), dst.size(), width, out.data_ptr<float>());
      } else if (out_memory) {
        std::memcpy(out_memory->Row(RowKey{static_cast<uint64_t>(dst.front()), 0}), rows, dst.size() * row_bytes);
      } else {
        ids.assign(dst.begin(), dst.end());
        return out_file->WriteRows(*io, std::span<const uint64_t>(ids.data(), ids.size()), rows);
      }
      return Status::Ok();
    } catch (const std::exception& e) {
      return InvalidArgument("the model failed in layer-wise inference, layer " + std::to_string(l + 1) + ": " + e.what());
    }
  };
  Status s = RunEvalPass(*p, pass, in, compute);
  if (!s.ok()) p->Abort(s);
  const Status finished = FinishPass(*p);
  SLUICE_RETURN_IF_ERROR(s);
  SLUICE_RETURN_IF_ERROR(finished);
  if (!across_processes()) return Status::Ok();
  // Every rank reads the next layer's inputs of every node, or reports every wanted node.
  if (!logits) return ShareLayer(static_cast<uint32_t>(width), pass.batch, out_memory, out_file, io.get());
  const std::vector<uint64_t> bounds = EvalStepBounds(pass.steps());
  return ShareLogits(*logits->sink(), logits->nodes().size(), [&](uint64_t i) {
    return EvalStepOwner(bounds, static_cast<uint64_t>(logits->nodes()[i]) / pass.batch);
  });
}

Status NcTask::InferLayerwise(const std::vector<int64_t>& nodes, LogitSink* sink) {
  torch::NoGradGuard no_grad;
  gnn_->eval();
  const std::string dir = cfg_.run_dir + "/inference";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("layer-wise inference: create " + dir + ": " + ec.message());
  SLUICE_RETURN_IF_ERROR(SyncRows());  // the arena is reused below: dirty rows go home first
  const bool had_cache = cache_ != nullptr;
  RowSource in = FeatureSource();
  std::unique_ptr<MemoryRows> held;             // in memory: the previous layer's outputs
  std::unique_ptr<ArrayBacking> file;           // out of core: the previous layer's row file
  std::unique_ptr<RowCache> cache;              // ... and a cache over it in the arena
  const NodeLogits logits(nodes, sink);
  Status s = Status::Ok();
  for (int l = 0; l < gnn_->layers() && s.ok(); ++l) {
    const bool last = l + 1 == gnn_->layers();
    const auto width = static_cast<uint32_t>(gnn_->OutputWidth(l));
    const uint32_t row_bytes = width * 4;
    std::unique_ptr<MemoryRows> out_memory;
    std::unique_ptr<RowFile> out_file;
    const std::string path = dir + "/layer-" + std::to_string(l + 1) + ".bin";
    if (!last && memory_) {
      out_memory = std::make_unique<MemoryRows>(row_bytes, std::vector<uint64_t>{0, num_nodes_},
                                                [](const RowKey&, std::byte*) {});
    } else if (!last) {
      SLUICE_ASSIGN_OR_RETURN(out_file, RowFile::Create(path, row_bytes, num_nodes_, RowFileOptionsFrom(cfg_.io)));
    }
    s = LayerPass(l, in, out_memory.get(), out_file.get(), last ? &logits : nullptr);
    if (!s.ok() || last) break;
    // The first layer has read the features (or embeddings): their cache's index goes until the
    // last layer is done, while the next layer's cache uses the arena.
    if (l == 0) ReleaseFeatureCache();
    // The next layer reads these outputs.
    in = RowSource{};
    in.row_bytes = row_bytes, in.dim = width, in.half = false, in.features = false;
    if (out_memory) {
      held = std::move(out_memory);
      in.memory = held.get();
      continue;
    }
    file = ArrayBacking::Wrap(std::move(out_file), DType::kFloat32, width);
    RowCacheOptions co = cache_options_;
    const uint64_t arena_bytes = cache_options_.capacity_rows * row_bytes_;
    co.capacity_rows = std::max<uint64_t>(1, arena_bytes / row_bytes);
    co.window_rows = cache_options_.window_rows * co.capacity_rows / std::max<uint64_t>(1, cache_options_.capacity_rows);
    cache = std::make_unique<RowCache>(co);
    in.cache = cache.get(), in.arena = arena_.data(), in.backing = file.get();
  }
  cache.reset();
  file.reset();
  fs::remove_all(dir, ec);
  if (had_cache) ResetFeatureCache();
  return s;
}

Status NcTask::InferNodes(const std::vector<int64_t>& nodes, bool full_neighbourhood, LogitSink* sink) {
  // A user's model (or encoder) has no per-layer outputs: it infers through blocks of every
  // neighbour. (Across processes each step's rows come from their owners, in either way.)
  if (!full_neighbourhood || !cfg_.eval.layerwise || !gnn_ || !encoder_name_.empty()) return Infer(nodes, sink);
  return InferLayerwise(nodes, sink);
}

}  // namespace sluice
