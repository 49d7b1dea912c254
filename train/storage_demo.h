#pragma once
// `sluice demo-storage`: the main job until training lands. Creates a row file, fills it,
// reads random row sets through the io layer (checking every byte), rewrites some rows and
// reads them back, and prints what the disk delivered.

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/status.h"
#include "common/thread_plan.h"
#include "storage/io_session.h"

namespace sluice {

struct StorageDemoSection {
  std::string dir = "runs/storage-demo";
  uint64_t rows = 2'000'000;
  int row_bytes = 200;  // e.g. a d=50 float32 embedding with its Adagrad state
  double density = 0.01;
  int steps = 20;
  uint64_t seed = 1;

  template <class V>
  void VisitFields(V& v) {
    v.Field("dir", dir, "directory for the demo's row file (created)");
    v.Field("rows", rows, "rows in the table", InRange<uint64_t>(1, uint64_t{1} << 36));
    v.Field("row_bytes", row_bytes, "bytes per row (need not be aligned)",
            InRange(8, 1 << 20));
    v.Field("density", density, "fraction of the table each step reads", InRange(1e-7, 1.0));
    v.Field("steps", steps, "random read/update steps", InRange(1, 1'000'000));
    v.Field("seed", seed, "seed of the row ids each step touches");
  }
};

struct StorageDemoConfig {
  ThreadConfig threads;
  IoConfig io;
  StorageDemoSection demo;

  template <class V>
  void VisitFields(V& v) {
    v.Section("threads", threads, "thread plan");
    v.Section("io", io, "io layer");
    v.Section("demo", demo, "what the storage demo does");
  }
};

Status RunStorageDemo(const StorageDemoConfig& config);

}  // namespace sluice
