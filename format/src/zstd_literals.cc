// See zstd_literals.h. Section numbers are RFC 8878's.
#include "zstd_literals.h"

#include <zstd.h>  // ZSTD_MAGICNUMBER, ZSTD_BLOCKSIZE_MAX (constants only)

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "ckfmt/file_layout.h"  // PutU16, PutU32
#include "zstd_frame.h"         // kMaxZstdWindow
#include "zstd_huffman.h"       // kMaxCodeBits, HighBit, StoreLE64, RunWithBmi2

namespace ckfmt {
namespace {

static_assert(kLiteralsBlockMax == ZSTD_BLOCKSIZE_MAX);  // Block_Maximum_Size (§3.1.1.2.4)

void PutU24(uint8_t* p, uint32_t v) {
  PutU16(p, uint16_t(v));
  p[2] = uint8_t(v >> 16);
}

// ---------------------------------------------------------------------------
// Which byte values occur: the range below 0x80 and the range from 0x80 on.
// Sign-and-exponent bytes fall in two narrow ranges, one per sign; a single
// range would span both and give a code to a hundred absent values.

struct ByteRanges {
  uint8_t lo_min = 0xff, lo_max = 0, hi_min = 0xff, hi_max = 0;
  bool Has(unsigned b) const {
    return b < 0x80 ? lo_min <= b && b <= lo_max : hi_min <= b && b <= hi_max;
  }
};

// Bytes [i, n) of `in`, a vector V at a time, into `r`; returns where it
// stopped. Two of the bounds come from all bytes unmasked: the least byte
// is the lower range's least where that range has any (else it is 0x80 or
// more, above lo_max = 0: the range is empty), and the greatest is the
// upper range's greatest likewise. Only lo_max and hi_min need the other
// range's bytes masked: eight instructions a vector, where masking for all
// four took eleven. Written with GCC's vector extensions (which clang
// takes too), so that each caller compiles it for the vectors it has.
typedef uint8_t Bytes16 __attribute__((vector_size(16)));
typedef int8_t SignedBytes16 __attribute__((vector_size(16)));
typedef uint8_t Bytes32 __attribute__((vector_size(32)));
typedef int8_t SignedBytes32 __attribute__((vector_size(32)));

template <typename V, typename SignedV>
__attribute__((always_inline)) inline size_t RangesByVectors(const uint8_t* in, size_t i, size_t n,
                                                             ByteRanges& r) {
  constexpr size_t kBytes = sizeof(V);
  const V none = {}, all = none - 1;
  V all_min = all, all_max = none, lo_max = none, hi_min = all;
  for (; i + kBytes <= n; i += kBytes) {
    V v;
    std::memcpy(&v, in + i, kBytes);
    const V low = V(SignedV(v) >= 0);  // all ones where the byte is below 0x80
    all_min = v < all_min ? v : all_min;
    all_max = v > all_max ? v : all_max;
    const V low_only = v & low, high_only = v | low;
    lo_max = low_only > lo_max ? low_only : lo_max;
    hi_min = high_only < hi_min ? high_only : hi_min;
  }
  for (size_t k = 0; k < kBytes; ++k) {
    r.lo_min = std::min(r.lo_min, uint8_t(all_min[k]));
    r.lo_max = std::max(r.lo_max, uint8_t(lo_max[k]));
    r.hi_min = std::min(r.hi_min, uint8_t(hi_min[k]));
    r.hi_max = std::max(r.hi_max, uint8_t(all_max[k]));
  }
  return i;
}

size_t RangesBy16(const uint8_t* in, size_t i, size_t n, ByteRanges& r) {
  return RangesByVectors<Bytes16, SignedBytes16>(in, i, n, r);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define CKFMT_RANGES_AVX2 1
__attribute__((target("avx2"))) size_t RangesBy32(const uint8_t* in, size_t i, size_t n,
                                                  ByteRanges& r) {
  return RangesByVectors<Bytes32, SignedBytes32>(in, i, n, r);
}
#endif

ByteRanges FindRanges(const uint8_t* in, size_t n) {
  ByteRanges r;
  size_t i = 0;
#if defined(CKFMT_RANGES_AVX2)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) i = RangesBy32(in, i, n, r);
#endif
  i = RangesBy16(in, i, n, r);
  for (; i < n; ++i) {
    const uint8_t b = in[i];
    if (b < 0x80) {
      r.lo_min = std::min(r.lo_min, b);
      r.lo_max = std::max(r.lo_max, b);
    } else {
      r.hi_min = std::min(r.hi_min, b);
      r.hi_max = std::max(r.hi_max, b);
    }
  }
  return r;  // an absent half has min > max, and Has() finds nothing in it
}

// ---------------------------------------------------------------------------
// The Huffman code (§4.2.1).

struct Code {
  std::array<uint8_t, 256> bits{};  // 0: no code
  std::array<uint16_t, 256> value{};
  int max_bits = 0;
  int last = 0;  // the largest byte value with a code
};

// Lengths of an optimal prefix code for `count` (0: absent), at most
// kMaxCodeBits long: where the optimal code is deeper, the counts are halved
// (never below 1) and the code rebuilt. False if fewer than two symbols.
bool CodeLengths(std::array<uint32_t, 256> count, std::array<uint8_t, 256>& bits) {
  std::array<uint16_t, 256> sym;
  int leaves = 0;
  for (int s = 0; s < 256; ++s) {
    if (count[s]) sym[leaves++] = uint16_t(s);
  }
  if (leaves < 2) return false;
  for (;;) {
    std::sort(sym.begin(), sym.begin() + leaves, [&](uint16_t a, uint16_t b) {
      return count[a] != count[b] ? count[a] < count[b] : a < b;
    });
    // Two queues: leaves in count order, then inner nodes in creation
    // order (which is also count order).
    std::array<uint64_t, 511> weight;
    std::array<uint16_t, 511> parent;
    for (int i = 0; i < leaves; ++i) weight[i] = count[sym[i]];
    const int nodes = 2 * leaves - 1;
    int leaf = 0, inner = leaves;
    auto take = [&](int made) {
      if (leaf < leaves && (inner == made || weight[leaf] <= weight[inner])) return leaf++;
      return inner++;
    };
    for (int k = leaves; k < nodes; ++k) {
      const int a = take(k), b = take(k);
      weight[k] = weight[a] + weight[b];
      parent[a] = parent[b] = uint16_t(k);
    }
    std::array<uint8_t, 511> depth;
    depth[nodes - 1] = 0;
    int deepest = 0;
    for (int k = nodes - 2; k >= 0; --k) {
      depth[k] = uint8_t(depth[parent[k]] + 1);
      if (k < leaves) deepest = std::max(deepest, int(depth[k]));
    }
    if (deepest <= kMaxCodeBits) {
      bits.fill(0);
      for (int i = 0; i < leaves; ++i) bits[sym[i]] = depth[i];
      return true;
    }
    for (int i = 0; i < leaves; ++i) count[sym[i]] = (count[sym[i]] + 1) / 2;
  }
}

// Canonical code values as the decoder assigns them (§4.2.1.3): by
// increasing weight, i.e. longest codes first, then by byte value.
void AssignValues(Code& code) {
  std::array<int, kMaxCodeBits + 2> per_length{};
  code.max_bits = 0;
  code.last = 0;
  for (int s = 0; s < 256; ++s) {
    if (code.bits[s]) {
      ++per_length[code.bits[s]];
      code.max_bits = std::max(code.max_bits, int(code.bits[s]));
      code.last = s;
    }
  }
  std::array<uint32_t, kMaxCodeBits + 2> next{};
  uint32_t first = 0;
  for (int len = code.max_bits; len > 0; --len) {
    next[len] = first;
    first = (first + per_length[len]) >> 1;
  }
  for (int s = 0; s < 256; ++s) {
    if (code.bits[s]) code.value[s] = uint16_t(next[code.bits[s]]++);
  }
}

// ---------------------------------------------------------------------------
// The code's description (§4.2.1.1-2): a weight per byte value below
// `last`, either four bits each (up to 128 of them) or FSE-coded.

// Bits written forward, least significant first (§4.1.1, §4.2.1.2).
class BitOut {
 public:
  BitOut(uint8_t* out, size_t cap) : out_(out), cap_(cap) {}
  void Put(uint32_t value, int bits) {
    acc_ |= uint64_t(value) << used_;
    used_ += bits;
    while (used_ >= 8) {
      if (size_ < cap_) out_[size_] = uint8_t(acc_);
      ++size_;
      acc_ >>= 8;
      used_ -= 8;
    }
  }
  // Bytes written, counting a partial last byte; more than `cap` where
  // the output did not fit.
  size_t Finish() {
    if (used_ > 0) Put(0, 8 - used_);
    return size_;
  }

 private:
  uint8_t* out_;
  size_t cap_, size_ = 0;
  uint64_t acc_ = 0;
  int used_ = 0;
};

// FSE-codes `w[0, n)` (values 0..kMaxCodeBits) the way the Huffman description
// uses it: accuracy 6, two states taking turns. Returns the bytes written,
// 0 if they would exceed `cap` or FSE cannot code `w` (a single distinct
// value).
size_t FseWeights(const uint8_t* w, int n, uint8_t* out, size_t cap) {
  constexpr int kLog = 6, kSize = 1 << kLog;
  std::array<int, kMaxCodeBits + 1> count{}, norm{};
  int top = 0, distinct = 0, largest = 0;
  for (int i = 0; i < n; ++i) ++count[w[i]];
  for (int v = 0; v <= kMaxCodeBits; ++v) {
    if (!count[v]) continue;
    top = v;
    ++distinct;
    if (count[v] > count[largest]) largest = v;
  }
  if (distinct < 2 || n < 2) return 0;
  // Normalized to kSize; no symbol below one cell, the remainder to the
  // commonest.
  int sum = 0;
  for (int v = 0; v <= top; ++v) {
    if (count[v]) norm[v] = std::max(1, (count[v] * kSize + n / 2) / n);
    sum += norm[v];
  }
  norm[largest] += kSize - sum;
  if (norm[largest] < 1) return 0;

  // The distribution (§4.1.1).
  BitOut bo(out, cap);
  bo.Put(kLog - 5, 4);
  int left = kSize;
  for (int v = 0; v <= top && left > 0;) {
    const int value = norm[v] + 1, max_value = left + 1;
    const int nbits = HighBit(uint32_t(max_value)) + 1;
    const int shorter = (1 << nbits) - 1 - max_value;  // values that take nbits - 1
    if (value < shorter) {
      bo.Put(uint32_t(value), nbits - 1);
    } else if (value < (1 << (nbits - 1))) {
      bo.Put(uint32_t(value), nbits);
    } else {
      bo.Put(uint32_t(value + shorter), nbits);
    }
    left -= norm[v];
    if (norm[v++] == 0) {  // a 2-bit repeat count of the zeros that follow
      int zeros = 0;
      while (norm[v + zeros] == 0) ++zeros;  // stops at `top` at the latest
      v += zeros;
      for (; zeros >= 3; zeros -= 3) bo.Put(3, 2);
      bo.Put(uint32_t(zeros), 2);
    }
  }
  const size_t header = bo.Finish();
  if (header > cap) return 0;

  // The decoding table's cells (§4.1.1): spread, and each symbol's cells
  // in state order.
  std::array<std::array<uint8_t, kSize>, kMaxCodeBits + 1> cells;
  std::array<int, kMaxCodeBits + 1> filled{};
  {
    std::array<uint8_t, kSize> symbol_at;
    int pos = 0;
    for (int v = 0; v <= top; ++v) {
      for (int k = 0; k < norm[v]; ++k) {
        symbol_at[pos] = uint8_t(v);
        pos = (pos + (kSize >> 1) + (kSize >> 3) + 3) & (kSize - 1);
      }
    }
    for (int u = 0; u < kSize; ++u) cells[symbol_at[u]][filled[symbol_at[u]]++] = uint8_t(u);
  }

  // Encoder states are kSize + a decoder state. Coding v from state x
  // emits the low bits of x that the decoder, in the cell it lands on,
  // reads back to return to x.
  BitOut bits(out + header, cap - header);
  auto encode = [&](int& x, int v) {
    int nb = 0;
    while ((x >> nb) >= 2 * norm[v]) ++nb;
    bits.Put(uint32_t(x & ((1 << nb) - 1)), nb);
    x = kSize + cells[v][(x >> nb) - norm[v]];
  };
  // The last two weights set the states without bits, each in its
  // symbol's first cell: the one whose update reads the most bits, at
  // least one, so that the decoder sees the stream end right after them.
  std::array<int, 2> state;  // [0] decodes even indices, [1] odd ones
  state[(n - 1) & 1] = kSize + cells[w[n - 1]][0];
  state[(n - 2) & 1] = kSize + cells[w[n - 2]][0];
  for (int i = n - 3; i >= 0; --i) encode(state[i & 1], w[i]);
  bits.Put(uint32_t(state[1] - kSize), kLog);  // read second
  bits.Put(uint32_t(state[0] - kSize), kLog);  // read first
  bits.Put(1, 1);                              // end mark
  const size_t body = bits.Finish();
  if (body > cap - header) return 0;
  return header + body;
}

// Writes the description; returns its size, 0 if it cannot be written.
size_t WriteDescription(const Code& code, uint8_t* out) {
  std::array<uint8_t, 256> weight{};
  for (int s = 0; s < code.last; ++s) {
    weight[s] = uint8_t(code.bits[s] ? code.max_bits + 1 - code.bits[s] : 0);
  }
  if (code.last <= 128) {  // direct: four bits per weight
    out[0] = uint8_t(127 + code.last);
    for (int s = 0; s < code.last; s += 2) out[1 + s / 2] = uint8_t(weight[s] << 4 | weight[s + 1]);
    return 1 + size_t(code.last + 1) / 2;
  }
  const size_t size = FseWeights(weight.data(), code.last, out + 1, 127);  // header byte < 128
  if (size == 0) return 0;
  out[0] = uint8_t(size);
  return 1 + size;
}

// Space for the largest description: 1 + 127 bytes.
constexpr size_t kMaxDescription = 128;

// ---------------------------------------------------------------------------
// Huffman-coded streams (§4.2.2), written so that the decoder, reading
// backwards, meets the first byte first: bytes are coded from the last.
// The bit container fills from its top: an entry holds a code value in its
// top bits and the code's length in the low six, so that adding a code is
// a shift, an or and an add; the entry's low bits land below the valid
// bits and are shifted out. An entry may also hold the codes of two
// adjacent bytes (a pair), which halves the work per byte.

using Entry = uint64_t;

Entry MakeEntry(uint32_t value, int bits) { return Entry{value} << (64 - bits) | Entry(bits); }

struct CodeTables {
  std::array<Entry, 256> one{};
  // pair[b0 | b1 << 8] codes bytes b0 b1 (b1 first, as coding runs
  // backwards); filled for coded bytes only, or not at all (null).
  const Entry* pair = nullptr;
};

struct Stream {
  uint64_t acc = 0;
  uint64_t used = 0;  // the low 6 bits count valid bits; higher ones are noise
  uint8_t* start;
  uint8_t* p;
  // REQUIRES: at most 58 valid bits after the add, so that the entry's low
  // six bits fall below them. Flushes leave at most 7.
  void Add(Entry e) {
    acc = (acc >> (e & 63)) | e;
    used += e;
  }
  // REQUIRES: 1..63 valid bits; 8 writable bytes at p.
  void Flush() {
    const unsigned n = unsigned(used & 63);
    StoreLE64(p, acc >> (64 - n));
    p += n >> 3;
    used = n & 7;
  }
  size_t Close() {
    Add(MakeEntry(1, 1));  // the end mark
    Flush();
    return size_t(p - start) + (used ? 1 : 0);
  }
};

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  if constexpr (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__) v = uint16_t(v << 8 | v >> 8);
  return v;
}

// Codes two streams: `a` of `la` bytes and `b` of `lb` <= la bytes. Two
// at a time: each stream's container is one dependency chain, and two
// chains keep the core busy without running out of registers.
__attribute__((always_inline)) inline void CodeTwoStreams(const CodeTables* t, const uint8_t* a,
                                                          size_t la, const uint8_t* b, size_t lb,
                                                          Stream* stream_a, Stream* stream_b) {
  // The containers and tables in locals: a flush stores through a uint8_t*,
  // which may alias anything, so containers reached through pointers went
  // to memory and back on every code, a store-to-load delay in each chain.
  Stream sa = *stream_a, sb = *stream_b;
  const Entry* one = t->one.data();
  const Entry* pair = t->pair;
  for (size_t i = la; i > lb; --i) {  // the bytes b lacks
    sa.Add(one[a[i - 1]]);
    sa.Flush();
  }
  size_t i = lb;
  if (pair) {
    if (i % 2) {
      --i;
      sa.Add(one[a[i]]);
      sb.Add(one[b[i]]);
      sa.Flush();
      sb.Flush();
    }
    // Two pairs, at most 44 bits, per flush.
    for (; i >= 4; i -= 4) {
      sa.Add(pair[Load16(a + i - 2)]);
      sb.Add(pair[Load16(b + i - 2)]);
      sa.Add(pair[Load16(a + i - 4)]);
      sb.Add(pair[Load16(b + i - 4)]);
      sa.Flush();
      sb.Flush();
    }
    if (i == 2) {
      sa.Add(pair[Load16(a)]);
      sb.Add(pair[Load16(b)]);
      sa.Flush();
      sb.Flush();
    }
    // Otherwise the flushes above left at most 7 bits, which Close writes;
    // another flush here could find none pending and shift by 64 (its
    // REQUIRES), as it once did when lb was a multiple of 4.
  } else {
    for (; i >= 4; i -= 4) {  // four codes of at most 11 bits per flush
      for (size_t j = 1; j <= 4; ++j) {
        sa.Add(one[a[i - j]]);
        sb.Add(one[b[i - j]]);
      }
      sa.Flush();
      sb.Flush();
    }
    while (i-- > 0) {
      sa.Add(one[a[i]]);
      sb.Add(one[b[i]]);
      sa.Flush();
      sb.Flush();
    }
  }
  *stream_a = sa;
  *stream_b = sb;
}

// CodeTwoStreams, with BMI2's shifts by a register where the CPU has them.
void CodeTwo(const CodeTables& t, const uint8_t* a, size_t la, const uint8_t* b, size_t lb,
             Stream& sa, Stream& sb) {
  RunWithBmi2<CodeTwoStreams>(&t, a, la, b, lb, &sa, &sb);
}

// Codes the `m` bytes of a block as four streams at out[k]; returns their
// sizes. Streams 0-2 take (m + 3) / 4 bytes each, stream 3 the rest.
std::array<size_t, 4> CodeStreams(const CodeTables& t, const uint8_t* in, size_t m,
                                  uint8_t* const* out) {
  const size_t seg = (m + 3) / 4;
  std::array<Stream, 4> st;
  for (int k = 0; k < 4; ++k) st[k].start = st[k].p = out[k];
  CodeTwo(t, in, seg, in + seg, seg, st[0], st[1]);
  CodeTwo(t, in + 2 * seg, seg, in + 3 * seg, m - 3 * seg, st[2], st[3]);
  return {st[0].Close(), st[1].Close(), st[2].Close(), st[3].Close()};
}

// The largest stream of a 128 KiB block: a quarter of it at kMaxCodeBits,
// the end mark, and the 8 bytes a flush may write past its end.
constexpr size_t kStreamCap = (kLiteralsBlockMax / 4 * kMaxCodeBits + 7) / 8 + 1 + 8;

// Pairs stop paying where codes are long: the pairs in use then spread
// over most of the 512 KiB table, and its lookups miss the cache. At a mean
// of 6.2 bits a byte (bf16 values coded whole) pairs coded 1.3x as fast as
// single codes; at 7.4 (fp32 values), 0.8x (bench/HISTORY.md, "Codes in
// registers").
constexpr double kMaxPairedMeanBits = 7.0;

// Builds the tables for `code`, whose bytes occur `count` times (in a
// sample). Pairs pay where the plane is long next to the number of pairs to
// fill, and its codes are short enough; their table is per thread, and only
// the entries of coded bytes are written (only those are read).
CodeTables MakeTables(const Code& code, const std::array<uint32_t, 256>& count, size_t n) {
  CodeTables t;
  std::array<uint8_t, 256> coded;
  size_t symbols = 0;
  double sampled_bits = 0, sampled = 0;  // the sample's, coded
  for (int s = 0; s < 256; ++s) {
    if (code.bits[s]) {
      t.one[s] = MakeEntry(code.value[s], code.bits[s]);
      coded[symbols++] = uint8_t(s);
      sampled_bits += double(count[s]) * code.bits[s];
      sampled += count[s];
    }
  }
  if (n < 16 * symbols * symbols || sampled_bits > kMaxPairedMeanBits * sampled) return t;
  thread_local std::vector<Entry> pair(size_t{1} << 16);
  for (size_t i = 0; i < symbols; ++i) {
    const int first = coded[i];  // the byte at the lower address, coded second
    for (size_t j = 0; j < symbols; ++j) {
      const int second = coded[j];
      const int bits = code.bits[first] + code.bits[second];
      const uint32_t value = uint32_t(code.value[first]) << code.bits[second] | code.value[second];
      pair[size_t(first) | size_t(second) << 8] = MakeEntry(value, bits);
    }
  }
  t.pair = pair.data();
  return t;
}

}  // namespace

size_t WriteLiteralsFrame(const uint32_t* sample_counts, const uint8_t* in, size_t n,
                          uint8_t* out, size_t cap) {
  return WriteLiteralsFrameInBlocks(sample_counts, in, n, kLiteralsBlockMax, out, cap);
}

size_t WriteLiteralsFrameInBlocks(const uint32_t* sample_counts, const uint8_t* in, size_t n,
                                  size_t block_max, uint8_t* out, size_t cap) {
  if (n < kLiteralsBlockMin || n > kMaxZstdWindow) return 0;
  if (block_max < kLiteralsBlockMin || block_max > kLiteralsBlockMax) return 0;
  // Every value in the ranges gets a code, sampled or not.
  const ByteRanges ranges = FindRanges(in, n);
  std::array<uint32_t, 256> count{};
  for (unsigned b = 0; b < 256; ++b) {
    if (ranges.Has(b)) count[b] = std::max<uint32_t>(sample_counts[b], 1);
  }
  Code code;
  if (!CodeLengths(count, code.bits)) return 0;
  AssignValues(code);
  uint8_t description[kMaxDescription];
  const size_t description_size = WriteDescription(code, description);
  if (description_size == 0) return 0;
  const CodeTables tables = MakeTables(code, count, n);

  // Frame header (§3.1.1.1): a single segment, whose window is the
  // content, and a 4-byte Frame_Content_Size.
  constexpr size_t kHeader = 4 + 1 + 4;
  if (cap < kHeader) return 0;
  PutU32(out, ZSTD_MAGICNUMBER);
  out[4] = uint8_t(2 << 6 | 1 << 5);
  PutU32(out + 5, uint32_t(n));
  size_t pos = kHeader;

  thread_local std::vector<uint8_t> scratch(4 * kStreamCap);
  uint8_t* streams[4];
  for (int k = 0; k < 4; ++k) streams[k] = scratch.data() + k * kStreamCap;
  bool described = false;
  for (size_t off = 0; off < n;) {
    const size_t m = std::min(block_max, n - off);
    const uint32_t last = off + m == n ? 1 : 0;
    if (m >= kLiteralsBlockMin) {
      const std::array<size_t, 4> size = CodeStreams(tables, in + off, m, streams);
      const size_t literals = (described ? 0 : description_size) + 6 + size[0] + size[1] +
                              size[2] + size[3];
      // Literals_Section_Header (5 bytes: 4 streams, 18-bit sizes), the
      // literals, and a Sequences_Section of no sequences (one zero byte).
      const size_t block = 5 + literals + 1;
      if (block < m) {
        if (cap - pos < 3 + block) return 0;
        uint8_t* b = out + pos;
        PutU24(b, last | 2u << 1 | uint32_t(block) << 3);  // Compressed_Block
        const uint64_t lit_header = (described ? 3u : 2u) | 3u << 2 | uint64_t(m) << 4 |
                                    uint64_t(literals) << 22;
        for (int k = 0; k < 5; ++k) b[3 + k] = uint8_t(lit_header >> (8 * k));
        uint8_t* q = b + 8;
        if (!described) {
          std::memcpy(q, description, description_size);
          q += description_size;
          described = true;
        }
        for (int k = 0; k < 3; ++k) PutU16(q + 2 * k, uint16_t(size[k]));
        q += 6;
        for (int k = 0; k < 4; ++k) {
          std::memcpy(q, streams[k], size[k]);
          q += size[k];
        }
        *q++ = 0;  // Number_of_Sequences
        pos += 3 + block;
        off += m;
        continue;
      }
    }
    if (cap - pos < 3 + m) return 0;
    PutU24(out + pos, last | uint32_t(m) << 3);  // Raw_Block
    std::memcpy(out + pos + 3, in + off, m);
    pos += 3 + m;
    off += m;
  }
  return pos;
}

}  // namespace ckfmt
