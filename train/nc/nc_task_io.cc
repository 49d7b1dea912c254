// The node-classification task's evaluation, checkpoints, export, prediction and summary
// (see nc_task_impl.h).
#include <cstdio>
#include <sstream>

#include "common/units.h"
#include "train/nc/nc_task_impl.h"
#include "train/run_dir.h"
#include "train/torch_io.h"
#include "train/npy.h"
#include "train/row_checkpoint.h"
#include "train/torch_io.h"

namespace sluice {

Result<Metrics> NcTask::Evaluate(const std::string& split) {
  const std::vector<int64_t>& nodes = Split(split);
  if (nodes.empty()) return InvalidArgument("dataset " + cfg_.dataset + " has no " + split + " split");
  // Each node's loss and class, not its logits.
  std::vector<int64_t> labels(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) labels[i] = labels_[static_cast<size_t>(nodes[i])];
  NodeScores scores(labels, classes_);
  SLUICE_RETURN_IF_ERROR(InferNodes(nodes, cfg_.eval.fanouts.empty(), &scores));
  const ClassMetrics m = scores.Metrics();
  char text[160];
  std::snprintf(text, sizeof text, "accuracy %.4f macro-F1 %.4f loss %.4f (%llu %s nodes)", m.accuracy,
                m.macro_f1, m.loss, static_cast<unsigned long long>(m.nodes), split.c_str());
  JsonObject j;
  j.Add("split", split), j.Add("nodes", m.nodes), j.Add("accuracy", m.accuracy);
  j.Add("macro_f1", m.macro_f1), j.Add("loss", m.loss);
  return Metrics{m.accuracy, text, j.str()};
}

Status NcTask::Save(CheckpointWriter& writer) {
  if (embeddings_ && across_processes()) {  // every rank's rows as its shard, rank 0 the manifest
    SLUICE_RETURN_IF_ERROR(
        CollectRowShards(*dp_, writer, "nodes.bin", sharded_->bounds(), row_bytes_, HeldRowsReader()));
  } else if (embeddings_) {
    SLUICE_RETURN_IF_ERROR(SyncRows());
    if (memory_) {
      SLUICE_RETURN_IF_ERROR(WriteDenseRows(*memory_, writer.PathOf("nodes.bin"), num_nodes_));
      SLUICE_RETURN_IF_ERROR(writer.Record("nodes.bin"));
    } else {
      SLUICE_RETURN_IF_ERROR(writer.CopyIn(row_file_->path(), "nodes.bin", &row_file_->dirty()));
    }
  }
  SLUICE_RETURN_IF_ERROR(SaveTorch(writer, "dense.pt", net_));
  return SaveTorch(writer, "dense_optimizer.pt", *opt_);
}

Status NcTask::Export(const std::string& dir) {
  std::vector<int64_t> all(num_nodes_);
  for (uint64_t v = 0; v < num_nodes_; ++v) all[v] = static_cast<int64_t>(v);
  // Each node's probabilities go to the file as its step computes: none are held.
  SLUICE_ASSIGN_OR_RETURN(NpyRowWriter probabilities,
                          NpyRowWriter::Create(dir + "/probabilities.npy", "<f4", num_nodes_,
                                               static_cast<uint64_t>(classes_), 4));
  ProbabilityRows rows(&probabilities, classes_);
  SLUICE_RETURN_IF_ERROR(InferNodes(all, true, &rows));
  SLUICE_RETURN_IF_ERROR(rows.status());
  SLUICE_RETURN_IF_ERROR(probabilities.Close());
  std::vector<int64_t> ids = all;  // the dataset's own ids when it kept the originals
  if (dataset_.Has("nodes.original_ids")) {
    SLUICE_ASSIGN_OR_RETURN(ids, dataset_.ReadInt64("nodes.original_ids"));
  }
  return WriteNpy(dir + "/node_ids.npy", "<i8", {static_cast<int64_t>(ids.size())}, ids.data(), ids.size() * 8);
}

Result<std::string> NcTask::Predict(const PredictRequest& request) {
  const std::vector<int64_t>& split = Split(request.split);
  if (split.empty()) return InvalidArgument("dataset " + cfg_.dataset + " has no " + request.split + " split");
  std::vector<int64_t> nodes(split.begin(), split.begin() + static_cast<int64_t>(std::min<uint64_t>(request.k, split.size())));
  TopClasses top(nodes.size(), classes_);  // 8 bytes a node, not its logits
  SLUICE_RETURN_IF_ERROR(InferNodes(nodes, true, &top));
  std::vector<int64_t> original;
  if (dataset_.Has("nodes.original_ids")) {
    SLUICE_ASSIGN_OR_RETURN(original, dataset_.ReadInt64("nodes.original_ids"));
  }
  std::ostringstream out;
  out << "node\tpredicted\tp\tlabel\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto v = static_cast<size_t>(nodes[i]);
    out << (original.empty() ? nodes[i] : original[v]) << "\t" << top.predicted(i) << "\t" << top.probability(i)
        << "\t" << labels_[v] << "\n";
  }
  return out.str();
}

void NcTask::Summarize(RunSummary& s) const {
  std::ostringstream line;
  line << "pipeline: sampler busy " << sample_time_.busy_s << " s (waiting for ring space " << sample_time_.wait_s
       << " s), planning " << plan_time_.busy_s << " s, io " << io_time_.busy_s << " s; compute waited "
       << wait_s_ << " s";
  s.Line(line.str());
  s.Line("compute thread: gather " + std::to_string(gather_s_) + " s, forward+backward+update " +
         std::to_string(compute_s_) + " s");
  s.Set("pipeline", "sample_busy_s", sample_time_.busy_s), s.Set("pipeline", "sample_wait_s", sample_time_.wait_s);
  s.Set("pipeline", "plan_busy_s", plan_time_.busy_s), s.Set("pipeline", "io_busy_s", io_time_.busy_s);
  s.Set("pipeline", "compute_wait_s", wait_s_);
  s.Set("compute", "gather_s", gather_s_), s.Set("compute", "model_s", compute_s_);
  if (dp_ != nullptr) SummarizeDataParallel(*dp_, sharded_ != nullptr ? num_nodes_ : 0, s);
  SummarizeEvaluationSteps(eval_steps_, across_processes(), s);
  if (cache_) {
    RowCacheStats cs = cache_->stats();
    cs.steps += earlier_cache_stats_.steps, cs.accesses += earlier_cache_stats_.accesses;
    cs.hits += earlier_cache_stats_.hits, cs.drained_steps += earlier_cache_stats_.drained_steps;
    const double steps = std::max<double>(1.0, static_cast<double>(cs.steps));
    std::ostringstream c;
    c << "cache: " << cs.steps << " steps, " << FormatCount(cs.accesses / steps) << " distinct rows per step, hit rate "
      << (cs.accesses ? 100.0 * cs.hits / cs.accesses : 0) << "%, rows loaded " << rows_loaded_ << " ("
      << FormatCount(rows_loaded_ / steps) << " per step; " << backing_->rows_read() << " read from disk)";
    s.Line(c.str());
    SummarizeDrainedSteps(s, cs.drained_steps);
    s.Set("cache", "steps", cs.steps), s.Set("cache", "capacity_rows", cache_->options().capacity_rows);
    s.Set("cache", "hit_rate", cs.accesses ? static_cast<double>(cs.hits) / cs.accesses : 0.0);
    s.Set("cache", "rows_loaded", rows_loaded_), s.Set("cache", "rows_read", backing_->rows_read());
    SummarizeDisk(s, "", io_requests_, io_bytes_, steps);
    if (spill_ != nullptr) SummarizeSpill(s, steps);
  }
  const bool in_memory = memory_ != nullptr;
  s.Set("memory", "mode", in_memory ? "in_memory" : "out_of_core");
  s.Set("memory", "budget_bytes", in_memory ? uint64_t{0} : cfg_.storage.budget.value);
  s.Set("memory", "predicted_bytes", plan_.predicted_bytes);
  s.Set("memory", "rows", num_nodes_), s.Set("memory", "row_bytes", row_bytes_);
  if (device_rows_ != nullptr) SummarizeDevice(s, *acc_, *device_rows_, device_wall_s_);
  if (purpose_ == Purpose::kTrain) {
    s.Line(sampler_line_);
    s.Set("sampler", "device", sample_on_device_ ? "cuda" : "cpu");
    if (sampler_cpu_ms_ > 0) {
      s.Set("sampler", "cpu_ms", sampler_cpu_ms_), s.Set("sampler", "cuda_ms", sampler_cuda_ms_);
      s.Set("sampler", "crossover_edges", sampler_crossover_edges_);
    }
  }
}

// What the spill did: sweeps, packs written, loads served from them and from the dataset.
void NcTask::SummarizeSpill(RunSummary& s, double steps) const {
  const SpillStats& st = spill_->stats();
  std::ostringstream l;
  l << "spill: every " << cfg_.storage.spill_steps << " steps a sweep of the features";
  if (SpillUnitsPerStep() > 1) l << " (" << spill_->options().horizon_steps << " units, this rank's shards)";
  l << "; "
    << FormatCount(static_cast<double>(st.rows_swept) / steps) << " rows swept, "
    << FormatBytes(static_cast<uint64_t>(static_cast<double>(st.bytes_written) / steps)) << " of packs written, "
    << FormatCount(static_cast<double>(st.rows_served) / steps) << " loads served from packs and "
    << FormatCount(static_cast<double>(st.rows_direct) / steps) << " from the dataset per step ("
    << FormatCount(static_cast<double>(st.rows_resident) / steps) << " left out of packs as the previous "
    << spill_->options().resident_steps << " steps' rows, resident); " << st.packs_dropped
    << " packs found no room; " << st.full_sweeps << " whole-file sweeps at a pass's start, "
    << st.passes_continued << " passes began with packs the pass before filled; listing " << st.list_s << " s, sweeps " << st.sweep_s << " s, pack reads " << st.serve_s
    << " s";
  s.Line(l.str());
  s.Set("spill", "horizon_steps", uint64_t{spill_->options().horizon_steps});
  s.Set("spill", "rows_swept", st.rows_swept), s.Set("spill", "rows_packed", st.rows_packed);
  s.Set("spill", "bytes_written", st.bytes_written), s.Set("spill", "rows_served", st.rows_served);
  s.Set("spill", "rows_direct", st.rows_direct), s.Set("spill", "packs_dropped", st.packs_dropped);
  s.Set("spill", "rows_resident", st.rows_resident);
  s.Set("spill", "resident_steps", uint64_t{spill_->options().resident_steps});
  s.Set("spill", "full_sweeps", st.full_sweeps), s.Set("spill", "passes_continued", st.passes_continued);
  s.Set("spill", "list_s", st.list_s), s.Set("spill", "sweep_s", st.sweep_s), s.Set("spill", "serve_s", st.serve_s);
}

}  // namespace sluice
