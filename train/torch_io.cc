#include "train/torch_io.h"

namespace sluice {
namespace {

std::string FirstLineOf(const std::string& text) {
  const size_t end = text.find('\n');
  std::string line = text.substr(0, end);
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

}  // namespace

// The TorchScript interpreter's errors start with a preamble; the cause comes last
// ("RuntimeError: mat1 and mat2 shapes cannot be multiplied ...").
std::string FirstLine(const std::string& text) {
  const std::string first = FirstLineOf(text);
  if (first.find("TorchScript interpreter") == std::string::npos) return first;
  std::string best;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.find("Error: ") != std::string::npos) best = line;
    start = end + 1;
  }
  return best.empty() ? first : best;
}

}  // namespace sluice
