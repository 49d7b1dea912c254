#pragma once
// Public API. What a user's model is built from: the shapes of the run it joins (ModelSpec),
// and the factory Run::SetModel takes. Torch-free: sluice/model.h defines Model.
//
// Thread safety: values; the factory is called once per Run, on the calling thread, after the
// dataset is opened and before training or reading starts.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

class Model;    // sluice/model.h
class Encoder;  // sluice/model.h

// The shapes a model of a run must fit, from the config and the dataset.
struct ModelSpec {
  std::string task;  // "link_prediction", "recommendation" or "node_classification"
  uint64_t seed = 0;           // train.seed; torch::manual_seed(seed) runs before the factory
  int64_t batch = 0;           // samples (link prediction: edges) per training step
  // link_prediction: the node rows' width (model.dim, floats per gathered row) is `dim`; the
  // relation count (with model.reciprocal, the reciprocal relations r + relations / 2 are
  // included) and whether queries corrupt tails only (reciprocal).
  // Each chunk of a step's queries shares `negatives` sampled nodes per corrupted side
  // (train.chunks, train.negatives).
  int64_t relations = 0;
  bool reciprocal = false;
  int64_t chunks = 0;
  int64_t negatives = 0;
  // recommendation: dense features D (0: none), categorical features C (tables), embedding
  // dim, floats per gathered row (dim, +1 with model.linear: the row's first-order weight
  // last), and the config's model.bottom / model.top hidden widths.
  int64_t dense_features = 0;
  int64_t tables = 0;
  int64_t dim = 0;
  int64_t row_width = 0;
  bool linear = false;
  std::vector<int> bottom_layers, top_layers;
  // node_classification: the feature width (0 without features), the classes, the sampled
  // hops (model.layers) and their fanouts (model.fanouts; -1: every neighbour), and the
  // learnable node embedding width (model.embedding_dim, 0: none).
  int64_t feature_dim = 0;
  int64_t classes = 0;
  int64_t layers = 0;
  std::vector<int> fanouts;
  int64_t embedding_dim = 0;
};

// Builds the model for a spec. May throw (the exception becomes the returned Status) or return
// null (refused: InvalidArgument).
using ModelFactory = std::function<std::shared_ptr<Model>(const ModelSpec&)>;
// Builds an encoder for a spec (Run::SetEncoder), under the same rules.
using EncoderFactory = std::function<std::shared_ptr<Encoder>(const ModelSpec&)>;

}  // namespace sluice
