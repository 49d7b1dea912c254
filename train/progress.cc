#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "train/run_dir.h"

namespace sluice {
namespace {
double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

ProgressBar::ProgressBar(bool enabled, std::string unit, int epochs)
    : enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0), unit_(std::move(unit)), epochs_(epochs) {}

void ProgressBar::BeginEpoch(uint64_t epoch, uint64_t total, uint64_t done) {
  epoch_ = epoch;
  total_ = total;
  done_ = done;
  trained_ = 0;
  loss_sum_ = 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

void ProgressBar::Step(uint64_t units, double loss_sum, bool last) {
  done_ += units;
  trained_ += units;
  loss_sum_ += loss_sum;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (last || (tty_ && Seconds(now - last_draw_) > 0.5)) {
    last_draw_ = now;
    Draw(last);
  }
}

void ProgressBar::Draw(bool last) {
  const double elapsed = Seconds(std::chrono::steady_clock::now() - start_);
  const double frac =
      std::min(1.0, static_cast<double>(done_) / std::max<double>(1.0, static_cast<double>(total_)));
  const double rate = static_cast<double>(trained_) / std::max(elapsed, 1e-9);
  const double left = static_cast<double>(total_ > done_ ? total_ - done_ : 0);
  const double eta = rate > 0 ? left / rate : 0;
  const int bar = static_cast<int>(frac * 30);
  std::fprintf(stderr, "%sepoch %llu/%d [%.*s%*s] %5.1f%% loss %.4f %s %s/s ETA %.0fs   ",
               tty_ ? "\r" : "", static_cast<unsigned long long>(epoch_ + 1), epochs_, bar,
               "##############################", 30 - bar, "", 100 * frac,
               loss_sum_ / std::max<double>(1.0, static_cast<double>(trained_)),
               FormatCount(rate).c_str(), unit_.c_str(), eta);
  if (last) std::fprintf(stderr, "\n");
}

}  // namespace sluice
