// Op fusion (Note [Op fusion] in core/remapper.cc), black-box: a session with
// SessionOptions::remapping (the default) runs Conv2D + BiasAdd (+ Relu), MaxPoolGrad + ReluGrad
// and a layer's Conv2DBackpropFilter + BiasAddGrad (after its pool's gradient) as one op each, which its trace shows, and computes the same bits as a session with it off; a
// chain whose inner values anything else reads, feeds, fetches or orders is left alone.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <tessera/tessera.h>

#include "examples/digits_data.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

SessionOptions unfused() {
  SessionOptions o;
  o.remapping = false;
  return o;
}

// The names of the ops a traced step ran.
std::set<std::string> ops_run(Session& s, const std::vector<Output>& fetches, const FeedMap& feeds = {},
                              const std::vector<Operation>& targets = {}) {
  RunOptions o;
  o.trace = true;
  RunMetadata md;
  s.run(fetches, feeds, targets, o, &md);
  std::set<std::string> names;
  static const std::regex event("\"name\":\"([^\"]*)\",\"ph\":\"X\"");
  for (std::sregex_iterator it(md.trace_json.begin(), md.trace_json.end(), event), end; it != end; ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

// Values with negatives, zeros and exact ties, so that ReLU and the max pools' choices matter.
Tensor values(DType dtype, const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(-4, 4);
  Tensor t = Tensor::zeros(dtype, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = pick(rng) * 0.25;
    if (dtype == DType::Float32) {
      t.mutable_data<float>()[i] = static_cast<float>(v);
    } else {
      t.mutable_data<double>()[i] = v;
    }
  }
  return t;
}

struct ConvLayer {
  Shape in;
  int kh, kw, out_c, stride;
  std::string padding;
};

// im2col (one input channel, a strided window, a pointwise one), Winograd (4x4 and 2x2 tiles) and
// the direct convolution where the CPU has AVX-512 (im2col elsewhere).
const ConvLayer kConvLayers[] = {
    {Shape{2, 6, 6, 1}, 3, 3, 8, 1, "SAME"},  {Shape{1, 5, 5, 2}, 3, 3, 3, 2, "VALID"},
    {Shape{2, 3, 3, 4}, 1, 1, 5, 1, "SAME"},  {Shape{2, 4, 4, 8}, 3, 3, 8, 1, "SAME"},
    {Shape{1, 2, 2, 8}, 3, 3, 9, 1, "SAME"},  {Shape{2, 6, 6, 1}, 3, 3, 32, 1, "SAME"},
    {Shape{1, 7, 5, 3}, 3, 3, 20, 2, "VALID"},
};

TEST(RemapperTest, ConvBiasAddReluIsOneOpWithTheSameBits) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const ConvLayer& l : kConvLayers) {
      SCOPED_TRACE(fmt::format("{} {} {}x{} -> {} stride {} {}", dtype_name(dtype), l.in.to_string(), l.kh, l.kw,
                               l.out_c, l.stride, l.padding));
      Graph g;
      auto x = ops::placeholder(g, dtype, l.in, "x");
      auto f = ops::constant(g, values(dtype, Shape{l.kh, l.kw, l.in.dim(3), l.out_c}, 1), "f");
      auto b = ops::constant(g, values(dtype, Shape{l.out_c}, 2), "b");
      auto conv = ops::conv2d(x, f, {1, l.stride, l.stride, 1}, l.padding, "conv");
      auto biased = ops::bias_add(conv, b, "biased");
      auto y = ops::relu(biased, "y");
      auto z = ops::square(ops::bias_add(ops::conv2d(x, f, {1, l.stride, l.stride, 1}, l.padding, "conv2"), b,
                                         "biased2"),
                           "z");  // no ReLU after the bias
      const FeedMap feeds{{x, values(dtype, l.in, 3)}};
      Session fused(g);
      Session plain(g, unfused());
      EXPECT_EQ(ops_run(fused, {y, z}, feeds), (std::set<std::string>{"conv+biased+y", "conv2+biased2", "z"}));
      EXPECT_EQ(ops_run(plain, {y, z}, feeds),
                (std::set<std::string>{"conv", "biased", "y", "conv2", "biased2", "z"}));
      auto a = fused.run({y, z}, feeds);
      auto want = plain.run({y, z}, feeds);
      EXPECT_TRUE(a[0].equals(want[0])) << "relu(bias_add(conv2d))";
      EXPECT_TRUE(a[1].equals(want[1])) << "square(bias_add(conv2d))";
    }
  }
}

struct PoolLayer {
  Shape in;
  int k, stride;
  std::string padding;
};

// Windows that cover the input, that leave its last row and column out, and that overlap.
const PoolLayer kPoolLayers[] = {
    {Shape{2, 4, 4, 3}, 2, 2, "SAME"},
    {Shape{1, 5, 5, 2}, 2, 2, "VALID"},
    {Shape{2, 5, 5, 3}, 3, 2, "SAME"},
};

TEST(RemapperTest, MaxPoolGradReluGradIsOneOpWithTheSameBits) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const PoolLayer& l : kPoolLayers) {
      SCOPED_TRACE(fmt::format("{} {} {}x{} stride {} {}", dtype_name(dtype), l.in.to_string(), l.k, l.k, l.stride,
                               l.padding));
      Graph g;
      auto x = ops::placeholder(g, dtype, l.in, "x");
      auto r = ops::relu(x, "r");
      auto p = ops::max_pool(r, {1, l.k, l.k, 1}, {1, l.stride, l.stride, 1}, l.padding, "p");
      // A gradient of both signs, nonzero where a window's largest value is 0 too.
      auto w = ops::placeholder(g, dtype, Shape::unknown(), "w");
      auto dx = gradients({ops::reduce_sum(ops::mul(p, w))}, {x})[0];
      Session fused(g);
      Session plain(g, unfused());
      FeedMap fed{{x, values(dtype, l.in, 4)}};
      fed[w] = values(dtype, fused.run(p, fed).shape(), 5);
      const auto names = ops_run(fused, {dx}, fed);
      EXPECT_EQ(std::count_if(names.begin(), names.end(),
                              [](const std::string& n) {
                                return n.find("MaxPoolGrad+") != std::string::npos &&
                                       n.find("ReluGrad") != std::string::npos;
                              }),
                1);
      for (const std::string& n : names) EXPECT_THAT(n, ::testing::Not(::testing::EndsWith("/MaxPoolGrad")));
      EXPECT_TRUE(fused.run(dx, fed).equals(plain.run(dx, fed))) << "the gradient through max_pool(relu(x))";
    }
  }
}

TEST(RemapperTest, AChainWhoseInnerValuesAreReadElsewhereIsNotFused) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{1, 4, 4, 2}, "x");
  auto f = ops::constant(g, values(DType::Float32, Shape{3, 3, 2, 3}, 5), "f");
  auto b = ops::constant(g, values(DType::Float32, Shape{3}, 6), "b");
  auto conv = ops::conv2d(x, f, {1, 1, 1, 1}, "SAME", "conv");
  auto biased = ops::bias_add(conv, b, "biased");
  auto y = ops::relu(biased, "y");
  const FeedMap feeds{{x, values(DType::Float32, Shape{1, 4, 4, 2}, 7)}};
  Session s(g);
  // The bias's sum fetched: the ReLU stays apart (the convolution and its bias still fuse).
  EXPECT_EQ(ops_run(s, {y, biased}, feeds), (std::set<std::string>{"conv+biased", "y"}));
  // The convolution's output fetched: nothing fuses.
  EXPECT_EQ(ops_run(s, {y, conv}, feeds), (std::set<std::string>{"conv", "biased", "y"}));
  // Fed: the step starts at the bias.
  EXPECT_EQ(ops_run(s, {y}, {{conv, values(DType::Float32, Shape{1, 4, 4, 3}, 8)}}),
            (std::set<std::string>{"biased", "y"}));
  // The bias's op a target.
  EXPECT_EQ(ops_run(s, {y}, feeds, {biased.op()}), (std::set<std::string>{"conv", "biased", "y"}));
  // Fused where nothing else looks.
  EXPECT_EQ(ops_run(s, {y}, feeds), (std::set<std::string>{"conv+biased+y"}));
  // Another reader of the convolution, added to the graph later: the next plan does not fuse.
  auto other = ops::reduce_sum(conv, {}, false, "other");
  EXPECT_EQ(ops_run(s, {y, other}, feeds), (std::set<std::string>{"conv", "biased", "y", "other"}));
  // A control edge out of the bias's op.
  Operation after;
  {
    auto scope = g.control_dependencies({biased.op()});
    after = ops::identity(y, "after").op();
  }
  EXPECT_EQ(ops_run(s, {after.output(0)}, feeds), (std::set<std::string>{"conv", "biased", "y", "after"}));
  // The values are those of the unfused ops either way.
  Session plain(g, unfused());
  EXPECT_TRUE(s.run(y, feeds).equals(plain.run(y, feeds))) << "relu(bias_add(conv2d))";
}

// A bias whose length is not the convolution's channels, known only when the step runs: the
// error names the fused ops and says it is BiasAdd's check, as the unfused step's names BiasAdd.
TEST(RemapperTest, AWrongBiasFailsNamingTheBiasAdd) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{-1, 4, 4, 2}, "x");
  auto f = ops::placeholder(g, DType::Float32, Shape{3, 3, 2, -1}, "f");
  auto b = ops::placeholder(g, DType::Float32, Shape{-1}, "b");
  auto y = ops::relu(ops::bias_add(ops::conv2d(x, f, {1, 1, 1, 1}, "SAME", "conv"), b, "biased"), "y");
  const FeedMap feeds{{x, Tensor::zeros(DType::Float32, {1, 4, 4, 2})},
                      {f, Tensor::zeros(DType::Float32, {3, 3, 2, 3})},
                      {b, Tensor::zeros(DType::Float32, {5})}};
  Session fused(g);
  Session plain(g, unfused());
  const std::string got = testing::error_of<InvalidArgumentError>([&] { fused.run(y, feeds); });
  const std::string want = testing::error_of<InvalidArgumentError>([&] { plain.run(y, feeds); });
  EXPECT_THAT(got, HasSubstr("conv+biased+y (_FusedConv2D): BiasAdd: "));
  EXPECT_THAT(want, HasSubstr("biased (BiasAdd): "));
  // The same check's words after the names.
  EXPECT_EQ(got.substr(got.find("BiasAdd: ") + 9), want.substr(want.find("(BiasAdd): ") + 11));
}

// The ops of `names` whose name has `part` in it.
int count_with(const std::set<std::string>& names, const std::string& part) {
  return static_cast<int>(
      std::count_if(names.begin(), names.end(), [&](const std::string& n) { return n.find(part) != std::string::npos; }));
}

// A convolution layer's filter and bias gradients, max_pool(relu(bias_add(conv2d))) or not: one op
// (with the pool's gradient before it where there is a pool), the same bits as the unfused ops.
// Besides kConvLayers (im2col, Winograd, one direct part), the digits CNN's first layer at batch
// 256 (the direct kernel in parts, each image's gradient made and used in cache) and at batch 100
// (parts that split BiasAddGrad's: the gradient made whole first).
TEST(RemapperTest, ALayersFilterAndBiasGradientsAreOneOpWithTheSameBits) {
  std::vector<ConvLayer> layers(std::begin(kConvLayers), std::end(kConvLayers));
  layers.push_back({Shape{256, 8, 8, 1}, 3, 3, 32, 1, "SAME"});
  layers.push_back({Shape{100, 8, 8, 1}, 3, 3, 32, 1, "SAME"});
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const ConvLayer& l : layers) {
      for (bool pool : {false, true}) {
        SCOPED_TRACE(fmt::format("{} {} {}x{} -> {} stride {} {}{}", dtype_name(dtype), l.in.to_string(), l.kh, l.kw,
                                 l.out_c, l.stride, l.padding, pool ? ", max pool" : ""));
        Graph g;
        auto x = ops::placeholder(g, dtype, l.in, "x");
        auto f = ops::constant(g, values(dtype, Shape{l.kh, l.kw, l.in.dim(3), l.out_c}, 1), "f");
        auto b = ops::constant(g, values(dtype, Shape{l.out_c}, 2), "b");
        auto y = ops::relu(ops::bias_add(ops::conv2d(x, f, {1, l.stride, l.stride, 1}, l.padding), b));
        if (pool) y = ops::max_pool(y, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME");
        auto w = ops::placeholder(g, dtype, Shape::unknown(), "w");
        auto grads = gradients({ops::reduce_sum(ops::mul(y, w))}, {f, b});
        Session fused(g);
        Session plain(g, unfused());
        FeedMap fed{{x, values(dtype, l.in, 3)}};
        fed[w] = values(dtype, fused.run(y, fed).shape(), 4);
        const auto names = ops_run(fused, grads, fed);
        EXPECT_EQ(count_with(names, "Conv2DBackpropFilter+"), 1);
        EXPECT_EQ(count_with(names, "+gradients/BiasAdd_grad/BiasAddGrad"), 1);
        EXPECT_EQ(count_with(names, "MaxPoolGrad+gradients/Relu_grad/ReluGrad+"), pool ? 1 : 0);
        auto got = fused.run(grads, fed);
        auto want = plain.run(grads, fed);
        EXPECT_TRUE(got[0].equals(want[0])) << "the filter's gradient";
        EXPECT_TRUE(got[1].equals(want[1])) << "the bias's gradient";
      }
    }
  }
}

// The layer's gradient read by a third op (the input's gradient) or fetched: each op runs alone.
TEST(RemapperTest, AGradientReadElsewhereKeepsItsFilterAndBiasGradientsApart) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{2, 6, 6, 1}, "x");
  auto f = ops::constant(g, values(DType::Float32, Shape{3, 3, 1, 16}, 1), "f");
  auto b = ops::constant(g, values(DType::Float32, Shape{16}, 2), "b");
  auto y = ops::relu(ops::bias_add(ops::conv2d(x, f, {1, 1, 1, 1}, "SAME"), b), "y");
  auto loss = ops::reduce_sum(ops::square(y));
  const FeedMap fed{{x, values(DType::Float32, Shape{2, 6, 6, 1}, 3)}};
  Session s(g);
  Session plain(g, unfused());
  auto with_input = gradients({loss}, {f, b, x});
  auto names = ops_run(s, with_input, fed);
  EXPECT_EQ(count_with(names, "Conv2DBackpropFilter+"), 0);
  EXPECT_EQ(count_with(names, "/Conv2DBackpropFilter"), 1);
  EXPECT_EQ(count_with(names, "/BiasAddGrad"), 1);
  auto grads = gradients({loss}, {f, b});  // its ops named with "_1"
  const Output dy = grads[1].op().input(0);  // what both gradients read
  names = ops_run(s, {grads[0], grads[1], dy}, fed);
  EXPECT_EQ(count_with(names, "Conv2DBackpropFilter_1+"), 0);
  EXPECT_EQ(count_with(names, "/BiasAddGrad_1"), 1);
  names = ops_run(s, grads, fed);
  EXPECT_EQ(count_with(names, "Conv2DBackpropFilter_1+gradients/BiasAdd_grad/BiasAddGrad_1"), 1);
  auto got = s.run(with_input, fed);
  auto want = plain.run(with_input, fed);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equals(want[i])) << i;
}

// A layer's gradient of the wrong shape, known only when the step runs: the fused filter and bias
// gradient fails naming its ops and the Conv2DBackpropFilter check, in that check's words.
TEST(RemapperTest, AWrongGradientFailsNamingTheFilterGradient) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, Shape{1, 4, 4, 2}, "x");
  auto f = ops::constant(g, values(DType::Float32, Shape{3, 3, 2, 3}, 1), "f");
  auto b = ops::constant(g, values(DType::Float32, Shape{3}, 2), "b");
  auto y = ops::bias_add(ops::conv2d(x, f, {1, 1, 1, 1}, "SAME", "conv"), b, "biased");
  auto dy = ops::placeholder(g, DType::Float32, Shape::unknown(), "dy");
  auto grads = gradients({y}, {f, b}, {ops::identity(dy, "dy_read")});
  const FeedMap feeds{{x, Tensor::zeros(DType::Float32, {1, 4, 4, 2})},
                      {dy, Tensor::zeros(DType::Float32, {1, 4, 4, 5})}};
  Session fused(g);
  Session plain(g, unfused());
  const std::string got = testing::error_of<InvalidArgumentError>([&] { fused.run(grads, feeds); });
  const std::string want = testing::error_of<InvalidArgumentError>([&] { plain.run(grads, feeds); });
  EXPECT_THAT(got, HasSubstr("(_FusedConv2DBackpropFilterWithBias): Conv2DBackpropFilter: out_backprop has shape "
                             "[1,4,4,5], expected [1,4,4,3]"));
  EXPECT_THAT(want, HasSubstr("(Conv2DBackpropFilter): out_backprop has shape [1,4,4,5], expected [1,4,4,3]"));
}

// The digits CNN (examples/digits_data.h), three Adam steps: every fusion the model has, the
// losses and the trained weights the same bits as without fusion.
TEST(RemapperTest, TheDigitsCnnTrainsToTheSameBits) {
  Graph g;
  auto x = ops::placeholder(g, DType::Float32, {-1, examples::kDigitsPixels}, "x");
  auto labels = ops::placeholder(g, DType::Int32, {-1}, "labels");
  auto logits = examples::digits_cnn(g)(x);
  auto loss = ops::reduce_mean(ops::sparse_softmax_cross_entropy_with_logits(labels, logits));
  auto train = train::AdamOptimizer(1e-2f).minimize(loss);
  std::vector<float> pixels(16 * examples::kDigitsPixels);
  std::vector<int32_t> digits(16);
  std::mt19937 rng(9);
  for (float& p : pixels) p = static_cast<float>(rng() % 17);
  for (int32_t& d : digits) d = static_cast<int32_t>(rng() % 10);
  const FeedMap feeds{{x, Tensor::from_vector<float>(pixels, Shape{16, examples::kDigitsPixels})},
                      {labels, Tensor::vector<int32_t>(digits)}};
  Session fused(g);
  Session plain(g, unfused());
  for (Session* s : {&fused, &plain}) s->run(global_variables_initializer(g));
  const auto names = ops_run(fused, {loss}, feeds, {train});
  int fused_ops = 0;
  for (const std::string& n : names) fused_ops += n.find('+') != std::string::npos;
  EXPECT_EQ(fused_ops, 4) << "two convolution layers, the second's pool gradient, the first's filter and bias "
                             "gradients with its pool gradient";
  plain.run({loss}, feeds, {train});
  for (int step = 0; step < 2; ++step) {
    EXPECT_TRUE(fused.run({loss}, feeds, {train})[0].equals(plain.run({loss}, feeds, {train})[0])) << "the loss";
  }
  for (const Variable& v : trainable_variables(g)) {
    EXPECT_TRUE(fused.run(v.value()).equals(plain.run(v.value()))) << v.name();
  }
}

}  // namespace
}  // namespace tessera
