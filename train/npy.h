#pragma once
// .npy files (NumPy format 1.0, little-endian, C order), written to a temporary name and
// renamed into place when complete.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace sluice {

// descr: NumPy's dtype string ("<f4", "<u8", "<i8"); `bytes` must equal the shape's elements
// times the dtype's width.
Status WriteNpy(const std::string& path, const char* descr, const std::vector<int64_t>& shape,
                const void* data, size_t bytes);

}  // namespace sluice
