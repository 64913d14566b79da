#include <tessera/tessera.h>

#include <cstdio>

int main() {
  tessera::Graph g;
  auto c = tessera::ops::add(tessera::ops::constant(g, 1), tessera::ops::constant(g, 2));
  tessera::Session s(g);
  int v = s.run(c).scalar<int32_t>();
  std::printf("consumer: 1 + 2 = %d\n", v);
  return v == 3 ? 0 : 1;
}
