#pragma once
// libtorch objects in checkpoints: saved through a CheckpointWriter (so they are fsynced and
// checksummed like every other file), loaded with libtorch's exceptions turned into one line
// naming the file.

#include <torch/torch.h>

#include <optional>
#include <sstream>
#include <string>

#include "common/status.h"
#include "train/checkpoint_store.h"

namespace sluice {

// The line of a libtorch error that says what failed: its first (the rest is a C++ stack
// trace), or for a TorchScript interpreter error the cause (its last "...Error: " line).
std::string FirstLine(const std::string& text);

// Saves a tensor, module or optimizer as `name`.
template <typename T>
Status SaveTorch(CheckpointWriter& writer, const std::string& name, const T& value) {
  std::ostringstream out;
  try {
    torch::save(value, out);
  } catch (const std::exception& e) {
    return IoError("checkpoint: serialise " + name + ": " + FirstLine(e.what()));
  }
  return writer.WriteString(name, out.str());
}

// Loads `name` of a checkpoint into a tensor, module or optimizer; with `device`, every tensor
// it holds is mapped there (a checkpoint written on a GPU read on the CPU, or the reverse).
template <typename T>
Status LoadTorch(const CheckpointReader& checkpoint, const std::string& name, T& value,
                 std::optional<torch::Device> device = std::nullopt) {
  SLUICE_ASSIGN_OR_RETURN(std::string path, checkpoint.PathOf(name));
  try {
    if (device) {
      torch::load(value, path, *device);
    } else {
      torch::load(value, path);
    }
  } catch (const std::exception& e) {
    return Corruption(path + ": cannot be loaded (" + FirstLine(e.what()) + ")");
  }
  return Status::Ok();
}

}  // namespace sluice
