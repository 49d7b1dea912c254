// sampler_bench: k-hop sampling throughput on a graph given as two raw int64 edge arrays
// (written by bench/sampler_vs_numpy.py, which runs a vectorised numpy sampler on the same
// graph in the same run) or as a dataset's training graph (in-neighbours, as node
// classification samples). Prints one JSON line: wall and CPU time.
//
//   sampler_bench (--src src.bin --dst dst.bin --nodes N | --dataset DIR) [--batch 1024]
//                 [--batches 50] [--fanouts 15,10,5] [--replace] [--threads 2]
//                 [--nodes-only] [--cuda]
//
// --nodes-only times KHopNodeSet (the sample's sorted node set on the calling thread, what the
// feature spill's listing draws) instead of the sampler. --cuda (builds with SLUICE_CUDA only)
// times the CUDA sampler, results copied back to host.

#include <CLI/CLI.hpp>
#include <tbb/global_control.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <vector>

#include "bench/fanouts.h"
#include "sampler/khop_nodes.h"
#include "sampler/khop_sampler.h"
#include "sampler/random.h"
#ifdef SLUICE_HAVE_CUDA
#include "sampler/cuda/khop_cuda.h"
#endif

namespace {

std::vector<int64_t> ReadInt64(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  SLUICE_CHECK(in.good(), "cannot open %s", path.c_str());
  std::vector<int64_t> v(static_cast<size_t>(in.tellg()) / 8);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 8));
  return v;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

sluice::CsrGraph LoadGraph(const std::string& dataset, const std::string& src_path, const std::string& dst_path,
                           uint64_t& nodes) {
  if (!dataset.empty()) {
    auto d = sluice::Dataset::Open(dataset);
    SLUICE_CHECK(d.ok(), "%s", d.status().ToString().c_str());
    auto g = sluice::CsrGraph::Load(*d, "train", sluice::Direction::kIn);
    SLUICE_CHECK(g.ok(), "%s", g.status().ToString().c_str());
    nodes = g->num_nodes();
    return std::move(*g);
  }
  SLUICE_CHECK(!src_path.empty() && !dst_path.empty() && nodes > 0, "give --dataset, or --src, --dst and --nodes");
  auto src = ReadInt64(src_path), dst = ReadInt64(dst_path);
  return sluice::CsrGraph::FromEdges(nodes, src, dst);
}

}  // namespace

int main(int argc, char** argv) {
  std::string src_path, dst_path, dataset, fanouts = "15,10,5";
  uint64_t nodes = 0, batch = 1024, batches = 50;
  int threads = 2;
  bool replace = false;
  bool cuda = false, nodes_only = false;
  CLI::App app{"k-hop sampler throughput"};
  app.add_option("--src", src_path, "int64 source ids");
  app.add_option("--dst", dst_path, "int64 destination ids");
  app.add_option("--nodes", nodes, "number of nodes");
  app.add_option("--dataset", dataset, "a dataset directory: its training graph's in-neighbours");
  app.add_flag("--nodes-only", nodes_only, "time the node set a spill's listing draws");
  app.add_option("--batch", batch, "seeds per batch");
  app.add_option("--batches", batches, "batches to sample");
  app.add_option("--fanouts", fanouts, "comma-separated fanouts");
  app.add_option("--threads", threads, "TBB threads");
  app.add_flag("--replace", replace, "sample with replacement");
  app.add_flag("--cuda", cuda, "time the CUDA sampler (SLUICE_CUDA builds)");
  CLI11_PARSE(app, argc, argv);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                            static_cast<size_t>(threads));
  sluice::KHopOptions options;
  options.fanouts = sluice::ParseFanouts(fanouts);
  options.replace = replace;
  const sluice::CsrGraph graph = LoadGraph(dataset, src_path, dst_path, nodes);
  const sluice::Key key(42);
  sluice::KHopSampler cpu(graph, options);
  std::function<sluice::SampledSubgraph(std::span<const int64_t>, const sluice::SampleKey&)>
      sample = [&](std::span<const int64_t> seeds, const sluice::SampleKey& k) {
        return cpu.Sample(seeds, k);
      };
#ifdef SLUICE_HAVE_CUDA
  std::unique_ptr<sluice::CudaKHopSampler> gpu;
  if (cuda) {
    auto made = sluice::CudaKHopSampler::Create(graph, options);
    SLUICE_CHECK(made.ok(), "%s", made.status().ToString().c_str());
    gpu = std::move(*made);
    sample = [&](std::span<const int64_t> seeds, const sluice::SampleKey& k) {
      auto s = gpu->Sample(seeds, k);
      SLUICE_CHECK(s.ok(), "%s", s.status().ToString().c_str());
      return std::move(*s);
    };
    std::vector<int64_t> warm = {0};
    sample(warm, {1, 0, 0});
  }
#else
  SLUICE_CHECK(!cuda, "--cuda: this build has no CUDA (configure with -DSLUICE_CUDA=ON)");
#endif
  SLUICE_CHECK(!(cuda && nodes_only), "--nodes-only times the CPU's node set: drop --cuda");
  sluice::KHopNodeSet node_set(graph);
  std::vector<uint64_t> node_rows;
  uint64_t edges = 0, rows = 0;
  std::vector<int64_t> seeds(batch);
  const double cpu_start = CpuSeconds();
  auto start = std::chrono::steady_clock::now();
  for (uint64_t b = 0; b < batches; ++b) {
    for (uint64_t i = 0; i < batch; ++i) {
      seeds[i] = static_cast<int64_t>(key.With(b).Below(i, nodes));
    }
    if (nodes_only) {
      node_rows.clear();
      node_set.Sample(seeds, {42, 0, b}, options, node_rows);
      rows += node_rows.size();
      continue;
    }
    sluice::SampledSubgraph s = sample(seeds, {42, 0, b});
    edges += s.blocks.back().src_local.size();
    rows += s.nodes().size();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_s = CpuSeconds() - cpu_start;
  const auto n = static_cast<double>(batches);
  std::printf("{\"mode\": \"%s\", \"edges_per_s\": %.0f, \"batches_per_s\": %.2f, \"edges_per_batch\": %.0f, "
              "\"rows_per_batch\": %.0f, \"wall_ms_per_batch\": %.2f, \"cpu_ms_per_batch\": %.2f, "
              "\"threads\": %d, \"cuda\": %s}\n",
              nodes_only ? "nodes-only" : "sample", static_cast<double>(edges) / seconds, n / seconds,
              static_cast<double>(edges) / n, static_cast<double>(rows) / n, 1e3 * seconds / n, 1e3 * cpu_s / n,
              nodes_only ? 1 : threads, cuda ? "true" : "false");
  return 0;
}
