// Runs a fuzz target without libFuzzer, for CTest: every seed file, then
// --mutations deterministic mutants of each (bit flips, interesting
// integers, truncation, insertion, deletion, duplication). Any crash or
// abort fails the test; the input being run is kept in a file named at
// start, to replay under a debugger or the libFuzzer build.
//
//   fuzz_replay_X [--mutations N] [--seed S] [--ckfmt-index] PATH...
//
// PATH is a file or a directory of files. --ckfmt-index feeds the index of
// each seed (a ckfmt file, located through its footer) instead of the file.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

Bytes ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The index bytes of a ckfmt file, or the file itself if its footer does
// not locate one.
Bytes IndexOf(const Bytes& f) {
  if (f.size() < 64) return f;
  const uint8_t* footer = f.data() + f.size() - 64;
  const uint64_t offset = GetU64(footer), length = GetU64(footer + 8);
  if (offset > f.size() - 64 || length > f.size() - 64 - offset) return f;
  return Bytes(f.begin() + offset, f.begin() + offset + length);
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  void Mutate(Bytes& b) {
    const int n = 1 + int(Below(3));
    for (int i = 0; i < n; ++i) MutateOnce(b);
  }

 private:
  uint64_t Below(uint64_t n) { return n ? rng_() % n : 0; }

  void MutateOnce(Bytes& b) {
    static const uint64_t kInteresting[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0x7fff, 0xffff,
                                            0x7fffffff, 0x80000000, 0xffffffff, 4096,
                                            1ull << 31, 1ull << 32, 1ull << 40, ~0ull,
                                            ~0ull - 63, 1ull << 63};
    const size_t size = b.size();
    switch (Below(7)) {
      case 0:  // flip a few bits
        if (size) {
          for (int k = 0, m = 1 + int(Below(8)); k < m; ++k) b[Below(size)] ^= uint8_t(1u << Below(8));
        }
        break;
      case 1:  // an interesting byte
        if (size) b[Below(size)] = uint8_t(kInteresting[Below(6)]);
        break;
      case 2: {  // an interesting or size-related 2/4/8-byte integer
        const size_t width = size_t(2) << Below(3);
        if (size < width) break;
        uint64_t v = Below(4) == 0 ? size - Below(std::min<size_t>(size, 128))
                                   : kInteresting[Below(std::size(kInteresting))];
        std::memcpy(&b[Below(size - width + 1)], &v, width);  // little-endian host
        break;
      }
      case 3:  // truncate
        b.resize(Below(size + 1));
        break;
      case 4: {  // insert random bytes
        Bytes ins(1 + Below(64));
        for (auto& x : ins) x = uint8_t(rng_());
        b.insert(b.begin() + Below(size + 1), ins.begin(), ins.end());
        break;
      }
      case 5: {  // delete a span
        if (!size) break;
        const size_t at = Below(size), len = 1 + Below(std::min<size_t>(size - at, 256));
        b.erase(b.begin() + at, b.begin() + at + len);
        break;
      }
      default: {  // copy a span over another place
        if (size < 2) break;
        const size_t from = Below(size), to = Below(size);
        const size_t len = 1 + Below(std::min(size - from, size - to));
        std::memmove(&b[to], &b[from], len);
        break;
      }
    }
  }

  std::mt19937_64 rng_;
};

}  // namespace

int main(int argc, char** argv) {
  long mutations = 0;
  uint64_t seed = 1;
  bool index_of = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mutations" && i + 1 < argc) {
      mutations = std::atol(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--ckfmt-index") {
      index_of = true;
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(a)) {
        if (e.is_regular_file()) files.push_back(e.path().string());
      }
    } else if (std::filesystem::is_regular_file(a)) {
      files.push_back(a);
    } else {
      std::fprintf(stderr, "no such seed file or directory: %s\n", a.c_str());
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--mutations N] [--seed S] [--ckfmt-index] PATH...\n", argv[0]);
    return 2;
  }
  const char* tmp = std::getenv("TMPDIR");
  const std::string current = std::string(tmp && *tmp ? tmp : "/tmp") + "/" +
                              std::filesystem::path(argv[0]).filename().string() + "-" +
                              std::to_string(getpid()) + ".input";
  std::printf("input being run: %s (removed after a clean run)\n", current.c_str());
  std::fflush(stdout);
  auto run = [&](const Bytes& b) {
    std::ofstream(current, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    LLVMFuzzerTestOneInput(b.data(), b.size());
  };
  long runs = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    Bytes base = ReadAll(files[f]);
    if (index_of) base = IndexOf(base);
    run(base);
    ++runs;
    Mutator m(seed * 0x9e3779b97f4a7c15ull + f);
    for (long i = 0; i < mutations; ++i, ++runs) {
      Bytes b = base;
      m.Mutate(b);
      run(b);
    }
  }
  std::remove(current.c_str());
  std::printf("%ld inputs from %zu seeds ran cleanly\n", runs, files.size());
  return 0;
}
