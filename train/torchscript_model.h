#pragma once
// A TorchScript file as a model behind the seam (sluice/model.h), so that Python users bring
// their own network without C++: torch.jit.script(module).save(FILE), then `model.torchscript:
// FILE` in the config.
//
// Recommendation's contract: the scripted module's forward(dense [B, D], rows [B, C, W]) returns
// one logit per sample [B]; the loss is the mean binary cross-entropy of the logits. The scripted
// module's parameters are registered with this module under their dotted names ('.' -> '_'), so
// the task's dense optimizer steps them in place and checkpoints save and restore them.
//
// Thread safety: as any model (one thread at a time).

#include <memory>
#include <string>

#include "sluice/model.h"
#include "sluice/model_factory.h"
#include "sluice/status.h"

namespace sluice {

// Loads `path` for a recommendation model of `spec`'s shapes; errors name the file and what is
// wrong (not a TorchScript file, no forward, a forward that fails on a probe batch or returns
// another shape).
Result<std::shared_ptr<Model>> LoadScriptedClickModel(const std::string& path, const ModelSpec& spec);

}  // namespace sluice
