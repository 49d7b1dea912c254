#pragma once
// "15,10,5" -> {15, 10, 5}: the benchmarks' --fanouts option (-1: every neighbour).

#include <string>
#include <vector>

namespace sluice {

inline std::vector<int> ParseFanouts(const std::string& text) {
  std::vector<int> out;
  for (size_t start = 0; start < text.size();) {
    const size_t comma = text.find(',', start);
    out.push_back(std::stoi(text.substr(start, comma - start)));
    start = comma == std::string::npos ? text.size() : comma + 1;
  }
  return out;
}

}  // namespace sluice
