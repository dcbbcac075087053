// The Huffman-coded literals of zstd frames (RFC 8878 §4.2): reading a
// code's description and cutting a block's literals into their streams.
// Shared by the check that walks streams by their codes' lengths
// (zstd_literals_check.cc) and the decoder (zstd_huffman_decode.h), so
// that both take and refuse the same frames; the writer
// (zstd_literals.cc) shares its bit helpers. Internal to the format
// library; section numbers are RFC 8878's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ckfmt {

// Max_Number_of_Bits (§4.2.1): the longest code, and the bits a table
// lookup peeks.
constexpr int kMaxCodeBits = 11;

inline int HighBit(uint32_t v) { return 31 - __builtin_clz(v); }  // REQUIRES: v > 0

inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) v = __builtin_bswap64(v);
  return v;
}

// The coders' hot store: one instruction where the host is little-endian.
inline void StoreLE64(uint8_t* p, uint64_t v) {
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
}

// Calls kKernel(args...) compiled for BMI2 where the CPU has it (a shift
// by a register is then one instruction instead of three), else as built.
// REQUIRES: kKernel is always_inline, so that each caller below gets a
// copy of it compiled its way.
#if defined(__x86_64__) && defined(__GNUC__)
template <auto kKernel, typename... Args>
__attribute__((target("bmi2"))) void RunBmi2(Args... args) {
  kKernel(args...);
}
template <auto kKernel, typename... Args>
void RunPortable(Args... args) {
  kKernel(args...);
}
template <auto kKernel, typename... Args>
void RunWithBmi2(Args... args) {
  static const bool bmi2 = __builtin_cpu_supports("bmi2");
  bmi2 ? RunBmi2<kKernel>(args...) : RunPortable<kKernel>(args...);
}
#else
template <auto kKernel, typename... Args>
void RunWithBmi2(Args... args) {
  kKernel(args...);
}
#endif

// A bitstream read backward (§4.1, §4.2.2): from the bit below the highest
// set bit of its last byte down to bit 0 of its first byte, and zeros
// beyond that. Exact and slow: for short streams and the ends of long ones.
class BackwardBits {
 public:
  // False where the stream is empty or its last byte, which holds the
  // start mark, is 0 (the stream is malformed).
  bool Init(const uint8_t* p, size_t size);
  void Seek(uint64_t consumed) { consumed_ = consumed; }

  // The next `k` bits (1 <= k <= 24), the first read in the highest bit.
  uint32_t Peek(int k) const;
  uint32_t Read(int k) {
    const uint32_t v = k ? Peek(k) : 0;
    consumed_ += uint64_t(k);
    return v;
  }
  void Skip(int k) { consumed_ += uint64_t(k); }
  bool Overread() const { return consumed_ > avail_; }
  bool AllRead() const { return consumed_ == avail_; }

 private:
  const uint8_t* p_ = nullptr;
  uint64_t avail_ = 0, consumed_ = 0;
};

// A Huffman code as its description gives it: a weight per symbol, the
// last symbol's implied (§4.2.1.1).
struct HuffmanCode {
  int log = 0;      // the longest code's length, at most kMaxCodeBits
  int symbols = 0;  // symbols [0, symbols) have weights, some of them 0
  std::array<uint8_t, 256> weight{};
};

// Reads a Huffman_Tree_Description (§4.2.1) from in[0, len) into `code`,
// as libzstd reads it. Returns the bytes it takes, or 0 where it cannot
// tell: a description libzstd refuses, or one it might read otherwise.
size_t ReadHuffmanCode(const uint8_t* in, size_t len, HuffmanCode& code);

// Calls f(symbol, length, first, count) for each symbol of `code` in the
// order of its codes (§4.2.1.3: lightest weight, so longest code, first;
// then by symbol): the 11-bit windows [first, first + count) begin with
// its code, which is `length` bits long. Together they cover [0, 2^11).
template <typename F>
void ForEachCode(const HuffmanCode& code, F&& f) {
  std::array<uint32_t, kMaxCodeBits + 2> first{};  // by weight
  for (int s = 0; s < code.symbols; ++s) {
    const int w = code.weight[size_t(s)];
    if (w > 0) first[size_t(w) + 1] += uint32_t{1} << (w - 1 + kMaxCodeBits - code.log);
  }
  for (int w = 2; w <= kMaxCodeBits + 1; ++w) first[size_t(w)] += first[size_t(w) - 1];
  for (int s = 0; s < code.symbols; ++s) {
    const int w = code.weight[size_t(s)];
    if (w == 0) continue;
    const uint32_t count = uint32_t{1} << (w - 1 + kMaxCodeBits - code.log);
    f(s, code.log + 1 - w, first[size_t(w)], count);
    first[size_t(w)] += count;
  }
}

// One Huffman stream of a block's literals (§4.2.2).
struct HuffmanStream {
  const uint8_t* src;  // the stream's bytes, [src, src + size)
  size_t size;
  size_t count;  // the symbols it decodes to
};

// Cuts the Huffman-coded literals in[0, size) (after the code's
// description, if any) that regenerate `regenerated` bytes into `streams`
// (1 or 4) streams, in the order their symbols come; four follow a jump
// table (§3.1.1.3.1.6). False where they break the format as libzstd reads
// it: no literals at all, a stream that is empty or whose last byte, which
// holds its start mark, is 0, a jump table past the end, or four streams
// for fewer than six literals.
bool CutHuffmanStreams(const uint8_t* in, size_t size, size_t regenerated, int streams,
                       HuffmanStream* out);

}  // namespace ckfmt
