// Writes a log directory with known contents through the public API, for
// tests/tensorboard_reader_test.py to read with TensorBoard's own EventAccumulator:
//   tensorboard_fixture DIR
// 50 steps of the scalar "wave/sine" = float(sin(0.1 * step)), the histogram
// "weights/layer1" of {-2, -1, 0, 0, 1, 2.5, step} every 10 steps (merged with the scalar), and the
// graph (placeholders v and h, a matmul "layer/y" over the variable "layer/w").
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "tessera/tessera.h"

int main(int argc, char** argv) {
  using namespace tessera;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    Graph g;
    auto v = ops::placeholder(g, DType::Float32, Shape{}, "v");
    auto h = ops::placeholder(g, DType::Float32, Shape{7}, "h");
    {
      auto scope = g.name_scope("layer");
      Variable w(g, Tensor::matrix<float>({1, 2, 3, 4}, 2, 2), "w");
      ops::matmul(w.value(), w.value(), false, false, "y");
    }
    Output sine = summary::scalar("wave/sine", v);
    Output hist = summary::histogram("weights/layer1", h);
    Output both = summary::merge({sine, hist});
    summary::FileWriter writer(argv[1]);
    writer.add_graph(g);
    Session s(g);
    for (int step = 0; step < 50; ++step) {
      FeedMap feeds{{v, Tensor::scalar(static_cast<float>(std::sin(0.1 * step)))},
                    {h, Tensor::vector<float>({-2, -1, 0, 0, 1, 2.5f, static_cast<float>(step)})}};
      writer.add_summary(s.run({step % 10 == 0 ? both : sine}, feeds)[0], step);
    }
    writer.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorboard_fixture: %s\n", e.what());
    return 1;
  }
  return 0;
}
