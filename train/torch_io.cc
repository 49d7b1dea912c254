#include "train/torch_io.h"

namespace sluice {

std::string FirstLine(const std::string& text) {
  const size_t end = text.find('\n');
  std::string line = text.substr(0, end);
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

}  // namespace sluice
