// The directly computed gradients of the bilinear decoders against libtorch's autograd on the
// same loss, for every decoder/loss pair, with query counts that do not divide into chunks.

#include "train/lp/lp_model.h"

#include <stdexcept>
#include <vector>

#include "train/lp/lp_eval.h"

#include <gtest/gtest.h>
#include <tbb/task_arena.h>

namespace sluice {
namespace {

struct Case {
  const char* decoder;
  const char* loss;
  bool heads;
};

// The config's enums by name (the cases read as the configs do).
template <typename E>
E Named(const char* name) {
  for (const auto& [v, n] : EnumNames<E>::kNames) {
    if (std::string(n) == name) return v;
  }
  ADD_FAILURE() << "no such name " << name;
  return EnumNames<E>::kNames[0].first;
}

void Check(const Case& c, int64_t q, int64_t chunks, int64_t n, int64_t d) {
  torch::manual_seed(7);
  LpBatch b;
  b.h = torch::randn({q, d});
  b.r = torch::randn({q, d});
  b.t = torch::randn({q, d});
  b.tail_neg = torch::randn({chunks, n, d});
  if (c.heads) b.head_neg = torch::randn({chunks, n, d});
  const double scale = 1.0 / static_cast<double>(q * (c.heads ? 2 : 1));
  LpGrads got = BilinearLossAndGrads(Named<Decoder>(c.decoder), Named<LossKind>(c.loss), 0.5, b, scale);

  // Autograd reference: the same chunked loss through LpDecoder and LpLoss.
  auto h = b.h.clone().requires_grad_(true), r = b.r.clone().requires_grad_(true),
       t = b.t.clone().requires_grad_(true), tn = b.tail_neg.clone().requires_grad_(true);
  torch::Tensor hn;
  if (c.heads) hn = b.head_neg.clone().requires_grad_(true);
  LpDecoder dec(Named<Decoder>(c.decoder));
  torch::Tensor tq = dec.TailQuery(h, r), pos = dec.Score(tq, t), loss = torch::zeros({});
  torch::Tensor hq = c.heads ? dec.HeadQuery(r, t) : torch::Tensor();
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t lo = q * k / chunks, hi = q * (k + 1) / chunks;
    loss = loss + LpLoss(Named<LossKind>(c.loss), 0.5, pos.slice(0, lo, hi), dec.ScoreAll(tq.slice(0, lo, hi), tn[k]));
    if (c.heads) {
      loss = loss + LpLoss(Named<LossKind>(c.loss), 0.5, pos.slice(0, lo, hi), dec.ScoreAll(hq.slice(0, lo, hi), hn[k]));
    }
  }
  loss.backward();
  const std::string what = std::string(c.decoder) + "/" + c.loss + (c.heads ? "/both" : "/tails");
  EXPECT_NEAR(got.loss, loss.item<double>(), 1e-3 * std::abs(loss.item<double>())) << what;
  auto close = [&](const torch::Tensor& a, const torch::Tensor& ref, const char* name) {
    EXPECT_TRUE(torch::allclose(a * 1.0, ref * scale, 1e-4, 1e-6)) << what << " d" << name;
  };
  close(got.h, h.grad(), "h");
  close(got.t, t.grad(), "t");
  close(got.tail_neg, tn.grad(), "tail_neg");
  if (c.heads) close(got.head_neg, hn.grad(), "head_neg");
  if (std::string(c.decoder) != "dot") close(got.r, r.grad(), "r");
}

TEST(LpModelTest, DirectGradientsMatchAutograd) {
  for (const char* decoder : {"distmult", "complex", "dot"}) {
    for (const char* loss : {"softmax", "logistic", "margin"}) {
      for (bool heads : {true, false}) {
        Check({decoder, loss, heads}, /*q=*/103, /*chunks=*/4, /*n=*/17, /*d=*/8);  // padded
        Check({decoder, loss, heads}, /*q=*/100, /*chunks=*/4, /*n=*/17, /*d=*/8);  // equal
        // Dimensions past the row kernels' 16 lanes, with a remainder.
        Check({decoder, loss, heads}, /*q=*/64, /*chunks=*/3, /*n=*/33, /*d=*/38);
      }
    }
  }
}

// The quality options (train.scoring: all, train.label_smoothing, model.*_dropout) against
// autograd on the loss they define: queries built from the masked entity and relation, 1vsAll
// with each query's true candidate's column left out of its softmax (-1: none left out).
struct QualityCase {
  const char* decoder;
  bool heads, all;
  float smoothing;
  bool dropout;
};

void CheckQuality(const QualityCase& c, int64_t q, int64_t n, int64_t d) {
  torch::manual_seed(11);
  const int64_t chunks = c.all ? 1 : 3;
  LpBatch b;
  b.h = torch::randn({q, d}), b.r = torch::randn({q, d}), b.t = torch::randn({q, d});
  b.tail_neg = torch::randn({chunks, n, d});
  if (c.heads) b.head_neg = torch::randn({chunks, n, d});
  BilinearOptions o;
  o.scale = 1.0 / static_cast<double>(q * (c.heads ? 2 : 1));
  o.smoothing = c.smoothing;
  std::vector<float> scores;
  o.scores = &scores;
  if (c.all) {
    o.tail_col = torch::randint(-1, n, {q}, torch::kInt64);
    if (c.heads) o.head_col = torch::randint(-1, n, {q}, torch::kInt64);
  }
  auto mask = [&](double p) { return torch::bernoulli(torch::full({q, d}, 1.0 - p)) / (1.0 - p); };
  if (c.dropout) {
    o.tail_entity_mask = mask(0.3), o.tail_relation_mask = mask(0.2);
    if (c.heads) o.head_entity_mask = mask(0.3), o.head_relation_mask = mask(0.2);
    auto candidates = [&](const torch::Tensor& neg) {
      return torch::bernoulli(torch::full(neg.sizes(), 0.75)) / 0.75;
    };
    o.tail_candidate_mask = candidates(b.tail_neg), o.tail_target_mask = mask(0.25);
    if (c.heads) o.head_candidate_mask = candidates(b.head_neg), o.head_target_mask = mask(0.25);
  }
  const Decoder decoder = Named<Decoder>(c.decoder);
  LpGrads got = BilinearLossAndGrads(decoder, b, o);

  auto h = b.h.clone().requires_grad_(true), r = b.r.clone().requires_grad_(true),
       t = b.t.clone().requires_grad_(true), tn = b.tail_neg.clone().requires_grad_(true);
  torch::Tensor hn = c.heads ? b.head_neg.clone().requires_grad_(true) : torch::Tensor();
  auto masked = [](const torch::Tensor& x, const torch::Tensor& m) { return m.defined() ? x * m : x; };
  auto excluded = [&](const torch::Tensor& col) {
    if (!col.defined()) return torch::Tensor();
    return torch::arange(n).unsqueeze(0).eq(col.unsqueeze(1));  // col -1 matches nothing
  };
  LpDecoder dec(decoder);
  torch::Tensor loss = torch::zeros({});
  for (int side = 0; side < (c.heads ? 2 : 1); ++side) {
    const bool tail = side == 0;
    torch::Tensor e = masked(tail ? h : t, tail ? o.tail_entity_mask : o.head_entity_mask);
    torch::Tensor rr = masked(r, tail ? o.tail_relation_mask : o.head_relation_mask);
    torch::Tensor query = tail ? dec.TailQuery(e, rr) : dec.HeadQuery(rr, e);
    torch::Tensor pos = dec.Score(query, masked(tail ? t : h, tail ? o.tail_target_mask : o.head_target_mask));
    torch::Tensor neg = masked(tail ? tn : hn, tail ? o.tail_candidate_mask : o.head_candidate_mask);
    const torch::Tensor ex = excluded(tail ? o.tail_col : o.head_col);
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t lo = q * k / chunks, hi = q * (k + 1) / chunks;
      loss = loss + LpLoss(LossKind::kSoftmax, 0, pos.slice(0, lo, hi),
                           dec.ScoreAll(query.slice(0, lo, hi), neg[k]), c.smoothing,
                           ex.defined() ? ex.slice(0, lo, hi) : ex);
    }
  }
  loss.backward();
  const std::string what = std::string(c.decoder) + (c.heads ? " both" : " tails") +
                           (c.all ? " 1vsAll" : " sampled") + " smoothing " +
                           std::to_string(c.smoothing) + (c.dropout ? " dropout" : "");
  EXPECT_NEAR(got.loss * o.scale, loss.item<double>() * o.scale, 1e-4 * std::abs(loss.item<double>() * o.scale))
      << what;
  auto close = [&](const torch::Tensor& a, const torch::Tensor& ref, const char* name) {
    EXPECT_TRUE(torch::allclose(a, ref * o.scale, 1e-4, 1e-6)) << what << " d" << name;
  };
  close(got.h, h.grad(), "h");
  close(got.t, t.grad(), "t");
  close(got.tail_neg, tn.grad(), "tail_neg");
  if (c.heads) close(got.head_neg, hn.grad(), "head_neg");
  if (std::string(c.decoder) != "dot") close(got.r, r.grad(), "r");
}

TEST(LpModelTest, QualityOptionsMatchAutograd) {
  for (const char* decoder : {"distmult", "complex", "dot"}) {
    for (bool heads : {false, true}) {
      for (bool all : {false, true}) {
        for (float smoothing : {0.0f, 0.1f}) {
          for (bool dropout : {false, true}) {
            if (!all && smoothing == 0 && !dropout) continue;  // the plain path, tested above
            // 1vsAll over query and candidate block edges (128 queries, 256 candidates).
            CheckQuality({decoder, heads, all, smoothing, dropout}, all ? 300 : 61, all ? 530 : 17, 20);
          }
        }
      }
    }
  }
}

// 1vsAll's two passes run on fixed blocks: the same bits at 1 and 2 threads.
TEST(LpModelTest, OneVsAllIgnoresThreadCount) {
  torch::manual_seed(5);
  const int64_t q = 300, n = 700, d = 24;
  LpBatch b;
  b.h = torch::randn({q, d}), b.r = torch::randn({q, d}), b.t = torch::randn({q, d});
  b.tail_neg = torch::randn({1, n, d});
  BilinearOptions o;
  o.scale = 1.0 / q;
  o.smoothing = 0.1f;
  o.tail_col = torch::randint(0, n, {q}, torch::kInt64);
  std::vector<float> scores;
  o.scores = &scores;
  LpGrads g[2];
  for (int threads : {1, 2}) {
    tbb::task_arena(threads).execute([&] { g[threads - 1] = BilinearLossAndGrads(Decoder::kComplEx, b, o); });
  }
  EXPECT_EQ(g[0].loss, g[1].loss);
  EXPECT_TRUE(torch::equal(g[0].h, g[1].h));
  EXPECT_TRUE(torch::equal(g[0].tail_neg, g[1].tail_neg));
}

TEST(LpModelTest, SoftmaxThroughTheLibtorchProductFallbackMatchesAutograd) {
  UseDirectBlasForTesting(false);
  for (const char* decoder : {"distmult", "complex"}) {
    Check({decoder, "softmax", true}, /*q=*/103, /*chunks=*/4, /*n=*/17, /*d=*/8);
    Check({decoder, "softmax", false}, /*q=*/3, /*chunks=*/4, /*n=*/17, /*d=*/8);  // empty chunk
  }
  UseDirectBlasForTesting(true);
}

TEST(LpModelTest, DecodersScoreAsDefined) {
  torch::manual_seed(1);
  auto h = torch::randn({5, 6}), r = torch::randn({5, 6}), t = torch::randn({5, 6});
  // ComplEx: Re(sum h * r * conj(t)) with halves as real and imaginary parts.
  auto hc = torch::complex(h.narrow(1, 0, 3), h.narrow(1, 3, 3));
  auto rc = torch::complex(r.narrow(1, 0, 3), r.narrow(1, 3, 3));
  auto tc = torch::complex(t.narrow(1, 0, 3), t.narrow(1, 3, 3));
  auto want = torch::real((hc * rc * torch::conj(tc)).sum(1));
  LpDecoder complex(Decoder::kComplEx);
  EXPECT_TRUE(torch::allclose(complex.Score(complex.TailQuery(h, r), t), want, 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(complex.Score(complex.HeadQuery(r, t), h), want, 1e-4, 1e-5));
  LpDecoder transe(Decoder::kTransE);
  EXPECT_TRUE(torch::allclose(transe.Score(transe.TailQuery(h, r), t), -(h + r - t).norm(2, 1), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(transe.ScoreAll(transe.TailQuery(h, r), t).diagonal(),
                              -(h + r - t).norm(2, 1), 1e-3, 1e-4));
}

// The L2 / N3 penalty of a step: value and gradient against autograd, over block boundaries
// (256 rows) and a non-contiguous gradient, and the same bits at 1 and 2 threads.
TEST(LpModelTest, RowPenaltyMatchesAutogradAndIgnoresThreadCount) {
  torch::manual_seed(3);
  for (bool n3 : {false, true}) {
    for (int64_t n : {1, 300, 700}) {
      for (int64_t d : {7, 50}) {
        SCOPED_TRACE(std::string(n3 ? "n3" : "l2") + " n=" + std::to_string(n) + " d=" + std::to_string(d));
        const double w = 0.0375;
        torch::Tensor x = torch::randn({n, d});
        torch::Tensor g0 = torch::randn({d, n}).t();  // a non-contiguous gradient
        const torch::Tensor before = g0.clone();
        torch::Tensor gx = g0;
        const double got = AddRowPenalty(n3, w, x, gx);
        auto xr = x.clone().requires_grad_(true);
        torch::Tensor loss = w * (n3 ? xr.abs().pow(3).sum() : xr.pow(2).sum());
        loss.backward();
        EXPECT_NEAR(got, loss.item<double>(), 1e-4 * std::abs(loss.item<double>()));
        EXPECT_TRUE(torch::allclose(gx, before + xr.grad(), 1e-5, 1e-6));
        double at[2];
        for (int threads : {1, 2}) {
          torch::Tensor g = before.clone();
          tbb::task_arena(threads).execute([&] { at[threads - 1] = AddRowPenalty(n3, w, x, g); });
        }
        EXPECT_EQ(at[0], at[1]);
      }
    }
  }
}

// DistMult written as a user's model scores through Predict (sluice/model.h's ranking input).
class UserDistMult : public Model {
 public:
  explicit UserDistMult(torch::Tensor rel) : rel_(std::move(rel)) {}
  torch::Tensor Loss(const ModelInput&) override { return torch::zeros({}); }
  torch::Tensor Predict(const ModelInput& in) override {
    if (shape_bug_) return torch::zeros({1, 1});
    if (throws_) throw std::runtime_error("user bug in Predict");
    const torch::Tensor r = rel_.index_select(0, in.ids.at("relation"));
    return (in.tables.at(0).uses * r).mm(in.tables.at(1).uses.t());  // symmetric: either side
  }
  uint64_t StepBytes() const override { return 0; }
  bool shape_bug_ = false, throws_ = false;

 private:
  torch::Tensor rel_;
};

// The ranking's two scorers agree: a user's model through Predict (true answers scored as the
// leading candidates) and the built-in decoder, on both corrupted sides; a model's exception or
// a wrongly shaped result is an error saying so.
TEST(LpModelTest, AUsersModelScoresRankingsAsTheBuiltInDecoderDoes) {
  torch::manual_seed(3);
  const torch::Tensor nodes = torch::randn({50, 8}), rel = torch::randn({4, 8});
  const torch::Tensor anchors = nodes.narrow(0, 0, 7), truth = nodes.narrow(0, 10, 7);
  const torch::Tensor ids = torch::tensor({0, 1, 2, 3, 0, 1, 2}, torch::kInt64);
  const LpDecoder decoder(Decoder::kDistMult);
  DecoderScorer builtin(decoder, rel);
  UserDistMult user_model(rel);
  ModelScorer user(user_model);
  for (bool head : {false, true}) {
    torch::Tensor t1, s1, t2, s2;
    ASSERT_TRUE(builtin.Score(anchors, ids, head, truth, nodes, t1, s1).ok());
    ASSERT_TRUE(user.Score(anchors, ids, head, truth, nodes, t2, s2).ok());
    ASSERT_EQ(s2.sizes(), (std::vector<int64_t>{7, 50}));
    ASSERT_EQ(t2.sizes(), (std::vector<int64_t>{7}));
    EXPECT_TRUE(torch::allclose(t1, t2, 1e-5, 1e-5)) << t1 << t2;
    EXPECT_TRUE(torch::allclose(s1, s2, 1e-5, 1e-5));
    // The true answer's own column scores as the true score.
    EXPECT_TRUE(torch::allclose(s2.index({torch::arange(7), torch::arange(10, 17)}), t2, 1e-5, 1e-5));
  }
  torch::Tensor t, s;
  user_model.shape_bug_ = true;
  Status st = user.Score(anchors, ids, false, truth, nodes, t, s);
  EXPECT_NE(st.message().find("scores of shape [1, 1] for 7 anchors and 57 candidates"), std::string::npos)
      << st.message();
  user_model.shape_bug_ = false, user_model.throws_ = true;
  st = user.Score(anchors, ids, true, truth, nodes, t, s);
  EXPECT_NE(st.message().find("the model failed ranking heads: user bug in Predict"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace sluice
