// The model seam: gathering uses, summing their gradients per row in a fixed order (bitwise
// the same at 1 and 2 TBB threads), running a model fused or through autograd (the autograd
// DistMult matches the fused one on FB15k-237 shapes), and a model's exception as an error.

#include "train/model_step.h"

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <complex>
#include <cstring>
#include <random>

#include "train/lp/lp_model.h"

namespace sluice {
namespace {

struct Step {
  std::vector<std::vector<float>> rows;  // distinct rows
  std::vector<float*> ptrs;
  std::vector<std::vector<int64_t>> parts;
};

Step RandomStep(int64_t rows, int64_t d, const std::vector<int64_t>& part_sizes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, 0.3f);
  Step s;
  s.rows.resize(static_cast<size_t>(rows));
  for (auto& r : s.rows) {
    r.resize(static_cast<size_t>(d));
    for (float& x : r) x = normal(rng);
  }
  for (auto& r : s.rows) s.ptrs.push_back(r.data());
  for (int64_t n : part_sizes) {
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (auto& x : p) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
    s.parts.push_back(std::move(p));
  }
  return s;
}

UseParts Parts(const Step& s) {
  UseParts p;
  for (const auto& x : s.parts) p.push_back(x);
  return p;
}

TEST(ModelStepTest, GatherPutsEveryUsesRowInOrder) {
  const Step s = RandomStep(100, 7, {30, 5000}, 1);
  TableInput t = GatherUses(s.ptrs, Parts(s), 7, true);
  ASSERT_EQ(t.uses.size(0), 5030);
  EXPECT_TRUE(t.uses.requires_grad());
  EXPECT_EQ(t.rows, 100);
  int64_t u = 0;
  for (const auto& part : s.parts) {
    for (int64_t id : part) {
      ASSERT_EQ(t.inverse[u].item<int64_t>(), id);
      ASSERT_EQ(std::memcmp(t.uses[u].data_ptr<float>(), s.rows[id].data(), 7 * 4), 0);
      ++u;
    }
  }
}

TEST(ModelStepTest, RowSumsAreBitwiseTheSameAtOneAndTwoThreads) {
  const int64_t d = 33, rows = 700;
  const Step s = RandomStep(rows, d, {4000, 1200, 9000}, 2);
  // Gradients as pieces that straddle the parts, as a fused model returns them.
  torch::manual_seed(3);
  const std::vector<torch::Tensor> grads = {torch::randn({3000, d}), torch::randn({2200, d}),
                                            torch::randn({9000, d})};
  torch::Tensor one, two;
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 1);
    one = SumRowGrads(Parts(s), grads, rows, d);
  }
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
    two = SumRowGrads(Parts(s), grads, rows, d);
  }
  ASSERT_EQ(std::memcmp(one.data_ptr<float>(), two.data_ptr<float>(), rows * d * 4), 0);
  // And they are the sums: against index_add in double.
  torch::Tensor all = torch::cat(grads).to(torch::kDouble);
  std::vector<int64_t> inv;
  for (const auto& p : s.parts) inv.insert(inv.end(), p.begin(), p.end());
  torch::Tensor want = torch::zeros({rows, d}, torch::kDouble)
                           .index_add_(0, torch::tensor(inv), all);
  EXPECT_TRUE(torch::allclose(one.to(torch::kDouble), want, 1e-5, 1e-5));
}

// The fused path and autograd on the same step of `cfg`'s LinkModel: q queries against `chunks`
// chunks of `per_chunk` negatives per corrupted side among `rows` distinct rows; with `all`
// (1vsAll) one chunk of every row, each query's true candidates' columns given as the sampler
// gives them. Every `loops`-th query (0: none) is made a self-loop (its tail its head).
void CompareFusedAndAutograd(const LpConfig& cfg, int64_t q, int64_t chunks, int64_t per_chunk,
                             int64_t rows, int64_t relations, int64_t loops = 0) {
  const bool all = cfg.train.scoring == Scoring::kAll;
  const int64_t d = cfg.model.dim, negs = chunks * per_chunk;
  Step s = RandomStep(rows, d, {q, q, negs, negs}, 4);
  for (int64_t i = 0; loops > 0 && i < q; i += loops) s.parts[1][static_cast<size_t>(i)] = s.parts[0][static_cast<size_t>(i)];
  std::vector<int64_t> rel(static_cast<size_t>(q)), tail_col, head_col;
  std::mt19937_64 rng(5);
  for (auto& r : rel) r = static_cast<int64_t>(rng() % static_cast<uint64_t>(relations));
  if (all) {  // the negatives are rows 0..rows-1 in order: a row's column is its index
    for (auto* part : {&s.parts[2], &s.parts[3]}) {
      for (int64_t j = 0; j < rows; ++j) (*part)[static_cast<size_t>(j)] = j;
    }
    tail_col = s.parts[1], head_col = s.parts[0];
  }
  auto input = [&](bool grad) {
    ModelInput in;
    in.tables.push_back(GatherUses(s.ptrs, Parts(s), d, grad));
    in.ids["relation"] = torch::tensor(rel);
    if (all) in.ids["tail_col"] = torch::tensor(tail_col), in.ids["head_col"] = torch::tensor(head_col);
    in.sizes = {{"queries", q}, {"chunks", chunks}, {"per_chunk", per_chunk}, {"head_negatives", 1}};
    in.key = {3, 1, 7};
    return in;
  };
  LinkModel model(cfg, static_cast<uint64_t>(relations), static_cast<uint64_t>(rows));
  ModelInput fused_in = input(false);
  auto fused = RunModel(model, fused_in, true);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  const torch::Tensor fused_rel = model.relations().grad().clone();
  model.relations().mutable_grad() = torch::Tensor();
  ModelInput auto_in = input(true);
  auto autograd = RunModel(model, auto_in, false);
  ASSERT_TRUE(autograd.ok()) << autograd.status().ToString();
  const torch::Tensor auto_rel = model.relations().grad();
  const torch::Tensor a = SumRowGrads(Parts(s), fused->use_grads[0], rows, d);
  const torch::Tensor b = SumRowGrads(Parts(s), autograd->use_grads[0], rows, d);
  auto rel_err = [](const torch::Tensor& x, const torch::Tensor& y) {
    return ((x - y).norm() / y.norm()).item<double>();
  };
  EXPECT_NEAR(fused->loss, autograd->loss, 1e-5 * std::abs(autograd->loss));
  EXPECT_LT(rel_err(a, b), 1e-5);
  EXPECT_LT(rel_err(fused_rel, auto_rel), 1e-5);
  EXPECT_LT((a - b).abs().max().item<float>(), 1e-5 * b.abs().max().item<float>() + 1e-9);
}

// FB15k-237 shapes of the Marius configuration: DistMult d=50, 1000 queries, 10 chunks of 500
// negatives per corrupted side, softmax.
TEST(ModelStepTest, AutogradDistMultMatchesTheFusedPathOnFb15kShapes) {
  LpConfig cfg;
  cfg.model.decoder = Decoder::kDistMult;
  cfg.model.dim = 50;
  cfg.train.batch = 1000;
  cfg.train.chunks = 10;
  cfg.train.negatives = 500;
  cfg.train.regularizer = Regularizer::kN3;
  cfg.train.regularization = 0.005;
  CompareFusedAndAutograd(cfg, 1000, 10, 500, 14541, 237);
}

// d=32 with dropout on the query's entity (0.3), relation (0.2) and the candidates (0.25), and
// label smoothing 0.1.
LpConfig DropoutConfig(Decoder decoder) {
  LpConfig cfg;
  cfg.model.decoder = decoder;
  cfg.model.dim = 32;
  cfg.model.entity_dropout = 0.3;
  cfg.model.relation_dropout = 0.2;
  cfg.model.candidate_dropout = 0.25;
  cfg.train.label_smoothing = 0.1;
  return cfg;
}

// The quality options through the model: 1vsAll (the columns from the step's ids), label
// smoothing, dropout masks drawn from the step's key (the same in both paths), both sides.
TEST(ModelStepTest, QualityOptionsThroughTheModelMatchAutograd) {
  for (Decoder decoder : {Decoder::kDistMult, Decoder::kComplEx}) {
    for (Scoring scoring : {Scoring::kSampled, Scoring::kAll}) {
      SCOPED_TRACE(std::string(EnumName(decoder)) + " " + EnumName(scoring));
      LpConfig cfg = DropoutConfig(decoder);
      cfg.train.scoring = scoring;
      cfg.train.regularizer = Regularizer::kN3;
      cfg.train.regularization = 0.005;
      cfg.train.relation_prediction = 0.7;
      if (scoring == Scoring::kAll) {
        CompareFusedAndAutograd(cfg, 200, 1, 900, 900, 20);
      } else {
        CompareFusedAndAutograd(cfg, 200, 4, 50, 900, 20);
      }
    }
  }
}

// train.own_negative: each query's own entity scored as one more negative except on a
// self-loop. The fused path matches autograd with the quality options, unequal chunks and
// self-loops in the step; and on a small step the loss is the softmax over [true, negatives,
// own] written out by hand, the self-loop's without its own term.
TEST(ModelStepTest, OwnNegativeScoresEachQuerysOwnEntityExceptOnSelfLoops) {
  for (Decoder decoder : {Decoder::kDistMult, Decoder::kComplEx}) {
    SCOPED_TRACE(EnumName(decoder));
    LpConfig cfg = DropoutConfig(decoder);
    cfg.train.own_negative = true;
    CompareFusedAndAutograd(cfg, 203, 4, 50, 900, 20, /*loops=*/7);
  }
  LpConfig cfg;
  cfg.model.dim = 4;
  cfg.train.own_negative = true;
  const int64_t d = 4, q = 2, n = 3;
  Step s = RandomStep(8, d, {q, q, n, n}, 9);
  s.parts[0] = {0, 1}, s.parts[1] = {2, 1};  // query 1 is a self-loop
  s.parts[2] = {3, 4, 5}, s.parts[3] = {6, 7, 0};
  auto loss_of = [&](bool own) {
    cfg.train.own_negative = own;
    LinkModel model(cfg, 1);
    ModelInput in;
    in.tables.push_back(GatherUses(s.ptrs, Parts(s), d, false));
    in.ids["relation"] = torch::tensor(std::vector<int64_t>{0, 0});
    in.sizes = {{"queries", q}, {"chunks", 1}, {"per_chunk", n}, {"head_negatives", 1}};
    auto g = RunModel(model, in, true);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return std::pair(g.ok() ? g->loss : 0.0, model.relations()[0].clone());
  };
  const auto [with_own, r] = loss_of(true);
  const double without = loss_of(false).first;
  auto row = [&](int64_t i) { return torch::from_blob(s.rows[static_cast<size_t>(i)].data(), {d}).to(torch::kFloat64); };
  const torch::Tensor rr = r.to(torch::kFloat64);
  double want = 0;
  for (int64_t i = 0; i < q; ++i) {
    const int64_t h = s.parts[0][i], t = s.parts[1][i];
    for (int side = 0; side < 2; ++side) {  // tails of (h, r, ?), then heads of (?, r, t)
      const int64_t anchor = side == 0 ? h : t, truth = side == 0 ? t : h;
      const torch::Tensor x = row(anchor) * rr;
      std::vector<double> logits = {(x * row(truth)).sum().item<double>()};
      for (int64_t c : s.parts[side == 0 ? 2 : 3]) logits.push_back((x * row(c)).sum().item<double>());
      if (h != t) logits.push_back((x * row(anchor)).sum().item<double>());
      double z = 0;
      for (double l : logits) z += std::exp(l);
      want += std::log(z) - logits[0];
    }
  }
  want /= 2 * q;
  EXPECT_NEAR(with_own, want, 1e-6 * want);
  EXPECT_GT(with_own, without + 1e-4) << "the own entity adds to query 0's normalizer";
}

// A dropout mask is its definition, element by element: kept (1 / (1 - p)) exactly when
// DropoutKey(key, site).Unit(i) >= p, over sizes that span several of the kernel's blocks and
// end off a vector's width, at 1 and 2 threads; the in-place KeyedDropout is x times that mask.
TEST(ModelStepTest, RelationsStartNearOneOrSymmetricAroundZero) {
  for (Decoder decoder : {Decoder::kDistMult, Decoder::kComplEx}) {
    SCOPED_TRACE(EnumName(decoder));
    LpConfig cfg;
    cfg.model.decoder = decoder;
    cfg.model.dim = 64;
    const torch::Tensor one = LinkModel(cfg, 6).relations().clone();
    EXPECT_GE(one.min().item<float>(), 0.9f);
    EXPECT_LE(one.max().item<float>(), 1.1f);
    cfg.model.relation_init_scale = 0.5;
    const torch::Tensor sym = LinkModel(cfg, 6).relations().clone();
    EXPECT_GE(sym.min().item<float>(), -0.5f);
    EXPECT_LE(sym.max().item<float>(), 0.5f);
    const double negative = (sym < 0).to(torch::kFloat).mean().item<double>();
    EXPECT_GT(negative, 0.4);  // about half of the 384 weights start negative
    EXPECT_LT(negative, 0.6);
    EXPECT_TRUE(torch::equal(sym, LinkModel(cfg, 6).relations()));  // a function of the seed
    cfg.train.seed = 2;
    EXPECT_FALSE(torch::equal(sym, LinkModel(cfg, 6).relations()));
  }
}

TEST(ModelStepTest, DropoutMaskKeepsElementIExactlyWhenItsDrawClearsP) {
  const SampleKey key{3, 2, 11};
  const int64_t n = 3 * 32768 + 37;
  for (double p : {0.1, 0.42, 0.5, 0.9, 1.0 / 3.0}) {
    SCOPED_TRACE(p);
    const Key k = DropoutKey(key, 6);
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    for (int threads : {1, 2}) {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
      const torch::Tensor mask = KeyedDropoutMask({n}, p, key, 6, torch::kCPU);
      const float* m = mask.data_ptr<float>();
      int64_t kept = 0, wrong = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float want = k.Unit(static_cast<uint64_t>(i)) >= p ? scale : 0.0f;
        wrong += m[i] != want;
        kept += m[i] != 0.0f;
      }
      EXPECT_EQ(wrong, 0);
      EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1.0 - p, 0.01);
      torch::Tensor x = torch::randn({n});
      const torch::Tensor want = x * mask;
      EXPECT_TRUE(torch::equal(KeyedDropout(x, p, key, 6), want));
    }
  }
  // Another site is another mask.
  EXPECT_FALSE(torch::equal(KeyedDropoutMask({n}, 0.5, key, 6, torch::kCPU),
                            KeyedDropoutMask({n}, 0.5, key, 7, torch::kCPU)));
}

// model.candidate_dropout under 1vsAll: every candidate is scored through one mask keyed on the
// step, and each query's true candidate through its column's row of that mask, so each query's
// loss is the plain cross-entropy over its row of the masked score matrix (fused and autograd).
TEST(ModelStepTest, OneVsAllTrueCandidateTakesItsColumnsDropoutMask) {
  LpConfig cfg;
  cfg.model.decoder = Decoder::kDistMult;
  cfg.model.dim = 16;
  cfg.model.reciprocal = true;
  cfg.model.candidate_dropout = 0.5;
  cfg.train.scoring = Scoring::kAll;
  const int64_t q = 40, rows = 90, d = 16, relations = 5;
  Step s = RandomStep(rows, d, {q, q, rows}, 6);
  for (int64_t j = 0; j < rows; ++j) s.parts[2][static_cast<size_t>(j)] = j;
  for (auto& r : s.rows) {
    for (float& x : r) x *= 4;  // scores far from zero, so a wrong mask shows in the loss
  }
  std::vector<int64_t> rel(static_cast<size_t>(q));
  for (int64_t i = 0; i < q; ++i) rel[static_cast<size_t>(i)] = i % relations;
  auto input = [&](bool grad) {
    ModelInput in;
    in.tables.push_back(GatherUses(s.ptrs, Parts(s), d, grad));
    in.ids["relation"] = torch::tensor(rel);
    in.ids["tail_col"] = torch::tensor(s.parts[1]);
    in.sizes = {{"queries", q}, {"chunks", 1}, {"per_chunk", rows}, {"head_negatives", 0}};
    in.key = {3, 1, 7};
    return in;
  };
  LinkModel model(cfg, static_cast<uint64_t>(relations), static_cast<uint64_t>(rows));
  torch::Tensor table = torch::empty({rows, d});
  for (int64_t j = 0; j < rows; ++j) std::memcpy(table[j].data_ptr<float>(), s.rows[static_cast<size_t>(j)].data(), d * 4);
  const torch::Tensor mask = KeyedDropoutMask({rows, d}, 0.5, SampleKey{3, 1, 7}, 4, torch::kCPU);
  const torch::Tensor query = table.index_select(0, torch::tensor(s.parts[0])) *
                              model.relations().detach().index_select(0, torch::tensor(rel));
  const torch::Tensor scores = query.matmul((table * mask).t());
  const torch::Tensor col = torch::tensor(s.parts[1]);
  const double want =
      (torch::logsumexp(scores, 1) - scores.gather(1, col.unsqueeze(1)).squeeze(1)).mean().item<double>();
  ModelInput fused_in = input(false);
  auto fused = RunModel(model, fused_in, true);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_NEAR(fused->loss, want, 1e-5 * std::abs(want));
  model.relations().mutable_grad() = torch::Tensor();
  ModelInput auto_in = input(true);
  auto autograd = RunModel(model, auto_in, false);
  ASSERT_TRUE(autograd.ok()) << autograd.status().ToString();
  EXPECT_NEAR(autograd->loss, want, 1e-5 * std::abs(want));
  // Without the mask the loss is another: the option is not inert.
  const torch::Tensor plain = query.matmul(table.t());
  const double unmasked =
      (torch::logsumexp(plain, 1) - plain.gather(1, col.unsqueeze(1)).squeeze(1)).mean().item<double>();
  EXPECT_GT(std::abs(unmasked - want), 0.01 * std::abs(want));
  // Nor does a true candidate scored through a mask of its own give it.
  const torch::Tensor own = KeyedDropoutMask({q, d}, 0.5, SampleKey{3, 1, 7}, 5, torch::kCPU);
  const torch::Tensor own_pos = (query * table.index_select(0, col) * own).sum(1);
  const double separate = (torch::logsumexp(scores, 1) - own_pos).mean().item<double>();
  EXPECT_GT(std::abs(separate - want), 0.01 * std::abs(want));
}

// train.relation_prediction: the loss grows by weight x the mean over queries of the
// cross-entropy of each query's relation among the relations of its direction (reciprocal rows
// [5, 10) compete among themselves), scored from its head and tail; computed here by hand in
// double. Fused and autograd alike; TransE through autograd.
TEST(ModelStepTest, RelationPredictionAddsEachQuerysRelationCrossEntropy) {
  const int64_t q = 30, rows = 60, d = 8, base = 5, chunks = 2, per_chunk = 10;
  for (Decoder decoder : {Decoder::kDistMult, Decoder::kComplEx, Decoder::kTransE}) {
    SCOPED_TRACE(EnumName(decoder));
    LpConfig cfg;
    cfg.model.decoder = decoder;
    cfg.model.dim = d;
    cfg.model.reciprocal = true;
    Step s = RandomStep(rows, d, {q, q, chunks * per_chunk}, 8);
    std::vector<int64_t> rel(static_cast<size_t>(q));
    for (int64_t i = 0; i < q; ++i) rel[static_cast<size_t>(i)] = (i * 7) % (2 * base);
    auto input = [&](bool grad) {
      ModelInput in;
      in.tables.push_back(GatherUses(s.ptrs, Parts(s), d, grad));
      in.ids["relation"] = torch::tensor(rel);
      in.sizes = {{"queries", q}, {"chunks", chunks}, {"per_chunk", per_chunk}, {"head_negatives", 0}};
      in.key = {3, 1, 7};
      return in;
    };
    auto loss_at = [&](double weight, bool fused, torch::Tensor* rel_grad) {
      cfg.train.relation_prediction = weight;
      LinkModel model(cfg, 2 * base, rows);
      model.relations().data().add_(torch::randn({2 * base, d}, torch::TensorOptions().dtype(torch::kFloat))
                                        .mul_(0.5), 1.0);  // relations far apart
      ModelInput in = input(!fused);
      auto r = RunModel(model, in, fused && decoder != Decoder::kTransE);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (rel_grad) *rel_grad = model.relations().grad().clone();
      return std::make_pair(r.ok() ? r->loss : 0.0, model.relations().detach().clone());
    };
    for (bool fused : {true, false}) {
      SCOPED_TRACE(fused ? "fused" : "autograd");
      torch::manual_seed(11);
      const auto [plain, relations] = loss_at(0.0, fused, nullptr);
      torch::manual_seed(11);
      torch::Tensor with_grad, without_grad;
      const auto [with, same] = loss_at(0.6, fused, &with_grad);
      ASSERT_TRUE(torch::equal(relations, same));
      torch::manual_seed(11);
      loss_at(0.0, fused, &without_grad);
      // By hand: score(h, r, t) per decoder, in double.
      auto score = [&](int64_t i, int64_t j) {
        const float* h = s.rows[static_cast<size_t>(s.parts[0][static_cast<size_t>(i)])].data();
        const float* t = s.rows[static_cast<size_t>(s.parts[1][static_cast<size_t>(i)])].data();
        const torch::Tensor row = relations[j].contiguous();
        const float* r = row.data_ptr<float>();
        double x = 0;
        if (decoder == Decoder::kDistMult) {
          for (int64_t k = 0; k < d; ++k) x += static_cast<double>(h[k]) * r[k] * t[k];
        } else if (decoder == Decoder::kComplEx) {
          for (int64_t k = 0; k < d / 2; ++k) {
            const std::complex<double> hc(h[k], h[k + d / 2]), rc(r[k], r[k + d / 2]), tc(t[k], t[k + d / 2]);
            x += (hc * rc * std::conj(tc)).real();
          }
        } else {
          for (int64_t k = 0; k < d; ++k) x += std::pow(static_cast<double>(h[k]) + r[k] - t[k], 2);
          x = -std::sqrt(x);
        }
        return x;
      };
      double ce = 0;
      for (int64_t i = 0; i < q; ++i) {
        const int64_t own = rel[static_cast<size_t>(i)], lo = own < base ? 0 : base;
        double m = -1e300, z = 0;
        for (int64_t j = lo; j < lo + base; ++j) m = std::max(m, score(i, j));
        for (int64_t j = lo; j < lo + base; ++j) z += std::exp(score(i, j) - m);
        ce += m + std::log(z) - score(i, own);
      }
      EXPECT_NEAR(with - plain, 0.6 * ce / q, 1e-5 * (0.6 * ce / q));
      EXPECT_GT(ce / q, 0.05);
      EXPECT_GT((with_grad - without_grad).abs().max().item<float>(), 1e-4);
    }
  }
}

// A learnable scale of every gathered row, in front of the model.
class ScaleEncoder : public Encoder {
 public:
  ScaleEncoder() { scale_ = register_parameter("scale", torch::full({1}, 1.5f)); }
  ModelInput Encode(ModelInput in) override {
    for (TableInput& t : in.tables) t.uses = t.uses * scale_;
    return in;
  }
  torch::Tensor scale_;
};

// A user's encoder in front of a fused model: the use gradients reach the gathered rows
// through the encoder, and its parameter gets its gradient, as autograd through the whole
// model computes them.
TEST(ModelStepTest, GradientsFlowThroughAnEncoderInFrontOfAFusedModel) {
  LpConfig cfg;
  cfg.model.decoder = Decoder::kDistMult;
  cfg.model.dim = 16;
  cfg.train.batch = 200;
  cfg.train.chunks = 2;
  cfg.train.negatives = 50;
  const int64_t q = 200, negs = 2 * 50, rows = 900, relations = 7, d = 16;
  const Step s = RandomStep(rows, d, {q, q, negs, negs}, 9);
  std::vector<int64_t> rel(q);
  for (int64_t i = 0; i < q; ++i) rel[static_cast<size_t>(i)] = i % relations;
  auto input = [&] {
    ModelInput in;
    in.tables.push_back(GatherUses(s.ptrs, Parts(s), d, /*requires_grad=*/true));
    in.ids["relation"] = torch::tensor(rel);
    in.sizes = {{"queries", q}, {"chunks", 2}, {"per_chunk", 50}, {"head_negatives", 1}};
    return in;
  };
  torch::manual_seed(3);
  auto encoder = std::make_shared<ScaleEncoder>();
  auto head = std::make_shared<LinkModel>(cfg, relations);
  EncodedModel model(encoder, head);
  ModelInput fused_in = input();
  auto fused = RunModel(model, fused_in, true);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  ASSERT_TRUE(fused->use_grads[0][0].defined());
  const torch::Tensor fused_scale = encoder->scale_.grad().clone();
  encoder->scale_.mutable_grad() = torch::Tensor();
  head->relations().mutable_grad() = torch::Tensor();
  ModelInput auto_in = input();
  auto autograd = RunModel(model, auto_in, false);
  ASSERT_TRUE(autograd.ok()) << autograd.status().ToString();
  const torch::Tensor a = SumRowGrads(Parts(s), fused->use_grads[0], rows, d);
  const torch::Tensor b = SumRowGrads(Parts(s), autograd->use_grads[0], rows, d);
  EXPECT_LT(((a - b).norm() / b.norm()).item<double>(), 1e-5);
  EXPECT_NEAR(fused_scale.item<float>(), encoder->scale_.grad().item<float>(),
              1e-4 * std::abs(encoder->scale_.grad().item<float>()) + 1e-7);
  EXPECT_GT(std::abs(fused_scale.item<float>()), 0.0f);
  // Without the encoder the rows' gradients differ by the scale.
  ModelInput plain_in = input();
  auto plain = RunModel(*head, plain_in, true);
  ASSERT_TRUE(plain.ok());
  EXPECT_GT((SumRowGrads(Parts(s), plain->use_grads[0], rows, d) - a).abs().max().item<float>(), 1e-6);
}

class ThrowingModel : public Model {
 public:
  torch::Tensor Loss(const ModelInput&) override { throw std::runtime_error("shape mismatch\nstack"); }
  uint64_t StepBytes() const override { return 0; }
};

TEST(ModelStepTest, AModelsExceptionIsAnErrorNamingTheStep) {
  ThrowingModel model;
  ModelInput in;
  in.key = {1, 2, 17};
  auto r = RunModel(model, in, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "the model failed at epoch 3, step 17: shape mismatch");
}

TEST(ModelStepTest, ShardGradientsAddUpInShardOrderIntoTheGradients) {
  // Two parameters, the first without a gradient in the first shard (the second's floats must
  // still land in their place); shards of 3 and 1 samples of a batch of 4, then one of none.
  torch::Tensor b = torch::zeros({3}, torch::requires_grad()), a = torch::zeros({2, 2}, torch::requires_grad());
  const std::vector<torch::Tensor> params{b, a};
  EXPECT_EQ(DenseFloats(params), 7u);
  DataParallel dp(nullptr, 3);
  EXPECT_EQ(ShardGradients::Bytes(dp, 7), 56u);  // the sum and the gradients made from it
  ShardGradients grads(dp, params);
  a.mutable_grad() = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({2, 2});
  grads.Add(0.5, 3, 4);  // b has no gradient: nothing of it
  a.mutable_grad() = torch::tensor({4.0f, 4.0f, 4.0f, 4.0f}).view({2, 2});
  b.mutable_grad() = torch::tensor({8.0f, 0.0f, -8.0f});
  grads.Add(2.0, 1, 4);
  grads.AddEmpty();
  Result<double> loss = grads.Finish();
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_EQ(*loss, 3.5);  // 0.5 x 3 + 2 x 1
  const torch::Tensor want_a = torch::tensor({1.75f, 2.5f, 3.25f, 4.0f}).view({2, 2});
  EXPECT_TRUE(torch::equal(a.grad(), want_a)) << a.grad();
  EXPECT_TRUE(torch::equal(b.grad(), torch::tensor({2.0f, 0.0f, -2.0f}))) << b.grad();
  EXPECT_EQ(dp.exchanges(), 1u);
  // In shard order 1e8, -1e8, 1 add up to (1e8 - 1e8) + 1 = 1; every other order gives 0 in
  // float ((1e8 + 1) - 1e8, (1 - 1e8) + 1e8, ...).
  ShardGradients order(dp, params);
  for (const float x : {1e8f, -1e8f, 1.0f}) {
    a.mutable_grad() = torch::full({2, 2}, x);
    b.mutable_grad() = torch::full({3}, x);
    order.Add(0.0, 1, 1);
  }
  ASSERT_TRUE(order.Finish().ok());
  EXPECT_TRUE(torch::equal(a.grad(), torch::ones({2, 2}))) << a.grad();
  EXPECT_TRUE(torch::equal(b.grad(), torch::ones({3}))) << b.grad();
}

}  // namespace
}  // namespace sluice
