// Saves and reloads a tiny state dict through the installed package.
#include <cstdio>
#include <cstring>

// Every public header that needs nothing beyond the package, so that each
// compiles as shipped (the test builds this with Clang too, where found).
#include "ckfmt/async_save.h"
#include "ckfmt/c_api.h"
#include "ckfmt/dist/dist_load.h"
#include "ckfmt/dist/dist_save.h"
#include "ckfmt/dist/sharded_state.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  using namespace ckfmt;
  Tensor t = Tensor::Zeros(DType::kF32, {4});
  static_cast<float*>(t.data())[3] = 1.5f;
  Dict d;
  d.Set("w", t);
  if (auto s = Save(argv[1], Value(d)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    return 1;
  }
  Value empty{Dict{}};
  auto report = Load(argv[1], &empty);
  if (!report.ok()) {
    std::fprintf(stderr, "%s\n", report.status().ToString().c_str());
    return 1;
  }
  const Value* w = empty.Find({std::string("w")});
  bool same = w && std::memcmp(w->as_tensor().data(), t.data(), 16) == 0;
  std::printf("consumer: %s\n", same ? "round trip ok" : "MISMATCH");
  return same ? 0 : 1;
}
