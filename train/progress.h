#pragma once
// The progress bar of a training run, on stderr:
//   epoch 2/10 [##########                    ]  33.3% loss 0.4567 1.23M edges/s ETA 12s
// On a terminal it is redrawn at most twice a second; otherwise (a log file) it is printed
// once per epoch, at its end. Not thread-safe: the compute thread drives it.

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice {

class ProgressBar {
 public:
  // unit: what a step trains ("edges", "samples"); epochs: the run's epoch count.
  ProgressBar(bool enabled, std::string unit, int epochs);
  // An epoch starts: `total` units in all, `done` of them trained before (a resumed epoch).
  void BeginEpoch(uint64_t epoch, uint64_t total, uint64_t done);
  // After a step of `units` whose summed loss is `loss_sum`; `last` ends the epoch's line.
  void Step(uint64_t units, double loss_sum, bool last);
  // Since BeginEpoch: units trained and their summed loss.
  uint64_t trained() const { return trained_; }
  double loss_sum() const { return loss_sum_; }

 private:
  void Draw(bool last);

  bool enabled_;
  bool tty_;
  std::string unit_;
  int epochs_;
  uint64_t epoch_ = 0, total_ = 0, done_ = 0, trained_ = 0;
  double loss_sum_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace sluice
