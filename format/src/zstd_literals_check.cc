// See zstd_literals_check.h. Section numbers are RFC 8878's. Where the RFC
// leaves a choice to the decoder, this one takes the narrower reading and
// cannot tell, so that libzstd, the reference, decides.
#include "zstd_literals_check.h"

#include <zstd.h>  // ZSTD_MAGICNUMBER, ZSTD_BLOCKSIZE_MAX (constants only)

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "ckfmt/file_layout.h"  // GetU16, GetU32
#include "zstd_block_decoder.h"  // ReadBlockHeader, ReadLiteralsOnlyBlock
#include "zstd_frame.h"         // kMaxZstdWindow
#include "zstd_literals_walk.h"  // Position, the AVX-512 walk

namespace ckfmt {
namespace {

constexpr int kMaxTableLog = kMaxCodeBits;        // Max_Number_of_Bits (§4.2.1)
constexpr int kMaxWeightLog = 6;                  // the weights' FSE accuracy (§4.2.1.2)
constexpr int kMaxWeight = 12;                    // libzstd refuses heavier weights

int HighBit(uint32_t v) { return 31 - __builtin_clz(v); }  // REQUIRES: v > 0

inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) v = __builtin_bswap64(v);
  return v;
}

// ---------------------------------------------------------------------------
// A bitstream read backward (§4.1, §4.2.2): from the bit below the highest
// set bit of its last byte down to bit 0 of its first byte, and zeros
// beyond that. Exact and slow: for short streams and the ends of long ones.

class BackwardBits {
 public:
  // False where the stream is empty or its last byte, which holds the
  // start mark, is 0 (the stream is malformed).
  bool Init(const uint8_t* p, size_t size) {
    if (size == 0 || p[size - 1] == 0) return false;
    p_ = p;
    avail_ = 8 * uint64_t(size - 1) + uint64_t(HighBit(p[size - 1]));
    consumed_ = 0;
    return true;
  }
  void Seek(uint64_t consumed) { consumed_ = consumed; }

  // The next `k` bits (1 <= k <= 24), the first read in the highest bit.
  uint32_t Peek(int k) const {
    if (consumed_ >= avail_) return 0;
    const uint64_t hi = avail_ - consumed_;  // unread bits are [0, hi)
    const uint64_t lo = hi > uint64_t(k) ? hi - k : 0;
    uint64_t word = 0;
    for (uint64_t b = (hi - 1) >> 3;; --b) {
      word = word << 8 | p_[b];
      if (b == lo >> 3) break;
    }
    const uint64_t got = (word >> (lo & 7)) & ((uint64_t{1} << (hi - lo)) - 1);
    return uint32_t(got << (uint64_t(k) - (hi - lo)));
  }
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

// ---------------------------------------------------------------------------
// Huffman weights (§4.2.1.1, §4.2.1.2), read as libzstd reads them.

using Weights = std::array<uint8_t, 256>;

// An FSE_Table_Description (§4.1.1), read forward: the normalized counts of
// symbols [0, *symbols) and the accuracy log. Returns the bytes it takes,
// or 0 where it cannot tell.
size_t ReadFseDescription(const uint8_t* in, size_t len, std::array<int16_t, 256>& counts,
                          int* symbols, int* accuracy_log) {
  const uint64_t total = 8 * uint64_t(len);
  uint64_t pos = 0;
  auto peek = [&](int k) {  // k <= 16 bits, least significant first; zeros past the end
    uint32_t v = 0;
    for (int i = 0; i < k; ++i) {
      const uint64_t b = pos + uint64_t(i);
      if (b < total) v |= uint32_t((in[b >> 3] >> (b & 7)) & 1) << i;
    }
    return v;
  };
  const int log = int(peek(4)) + 5;
  pos = 4;
  if (log > kMaxWeightLog) return 0;
  int remaining = (1 << log) + 1, threshold = 1 << log, bits = log + 1, sym = 0;
  bool previous_zero = false;
  while (sym < 256) {
    if (previous_zero) {
      for (;;) {  // 2-bit repeat flags: each adds that many zero counts; 3 says more follow
        const int repeat = int(peek(2));
        pos += 2;
        sym += repeat;
        if (repeat != 3) break;
      }
      if (sym >= 256) return 0;
    }
    const int max = 2 * threshold - 1 - remaining;
    const int value = int(peek(bits));
    int count;
    if ((value & (threshold - 1)) < max) {
      count = value & (threshold - 1);
      pos += uint64_t(bits - 1);
    } else {
      count = value & (2 * threshold - 1);
      if (count >= threshold) count -= max;
      pos += uint64_t(bits);
    }
    --count;  // -1: a probability below 1
    remaining -= count < 0 ? -count : count;
    counts[size_t(sym++)] = int16_t(count);
    previous_zero = count == 0;
    if (remaining < threshold) {
      if (remaining <= 1) break;
      bits = HighBit(uint32_t(remaining)) + 1;
      threshold = 1 << (bits - 1);
    }
  }
  if (remaining != 1 || pos > total) return 0;
  *symbols = sym;
  *accuracy_log = log;
  return size_t((pos + 7) / 8);
}

struct FseDecodeTable {
  int log = 0;
  std::array<uint8_t, 1 << kMaxWeightLog> symbol{}, bits{};
  std::array<uint16_t, 1 << kMaxWeightLog> base{};
};

// §4.1.1's decoding table. False where the counts do not fill it.
bool BuildFseTable(const std::array<int16_t, 256>& counts, int symbols, int log,
                   FseDecodeTable& t) {
  const uint32_t size = 1u << log, mask = size - 1;
  std::array<uint32_t, 256> next{};
  uint32_t high = size - 1;
  for (int s = 0; s < symbols; ++s) {
    if (counts[size_t(s)] == -1) {
      t.symbol[high--] = uint8_t(s);
      next[size_t(s)] = 1;
    } else {
      next[size_t(s)] = uint32_t(counts[size_t(s)]);
    }
  }
  const uint32_t step = (size >> 1) + (size >> 3) + 3;
  uint32_t position = 0;
  for (int s = 0; s < symbols; ++s) {
    for (int i = 0; i < counts[size_t(s)]; ++i) {
      t.symbol[position] = uint8_t(s);
      do {
        position = (position + step) & mask;
      } while (position > high);
    }
  }
  if (position != 0) return false;  // the counts do not fill the table
  for (uint32_t u = 0; u < size; ++u) {
    const uint32_t state = next[t.symbol[u]]++;
    const int bits = log - HighBit(state);
    t.bits[u] = uint8_t(bits);
    t.base[u] = uint16_t((state << bits) - size);
  }
  t.log = log;
  return true;
}

// FSE-compressed weights: two states over one bitstream, until it is
// overread (libzstd's reading of §4.2.1.2). Returns the weights decoded,
// 0 where it cannot tell.
int DecodeFseWeights(const uint8_t* in, size_t len, Weights& w) {
  std::array<int16_t, 256> counts{};
  int symbols = 0, log = 0;
  const size_t head = ReadFseDescription(in, len, counts, &symbols, &log);
  if (head == 0 || head >= len) return 0;
  FseDecodeTable t;
  if (!BuildFseTable(counts, symbols, log, t)) return 0;
  BackwardBits br;
  if (!br.Init(in + head, len - head)) return 0;
  uint32_t state[2] = {br.Read(log), br.Read(log)};
  for (int n = 0;;) {
    for (int s = 0; s < 2; ++s) {
      if (n > 253) return 0;  // libzstd's limit of 255 weights
      const uint32_t st = state[s];
      w[size_t(n++)] = t.symbol[st];
      state[s] = t.base[st] + br.Read(t.bits[st]);
      if (br.Overread()) {
        w[size_t(n++)] = t.symbol[state[1 - s]];
        return n;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Code lengths. Only lengths decide whether a stream decodes to a given
// number of symbols with every bit read, so the table maps the next 11 bits,
// whatever the code's own length, to that code's length.

using LengthTable = std::array<uint8_t, 1 << kMaxTableLog>;

// Reads a Huffman_Tree_Description (§4.2.1) from in[0, len) into `t`.
// Returns the bytes it takes, or 0 where it cannot tell.
size_t ReadHuffmanTree(const uint8_t* in, size_t len, LengthTable& t) {
  if (len == 0) return 0;
  Weights w{};
  const uint8_t header = in[0];
  int n;
  size_t size;
  if (header >= 128) {  // direct: 4 bits a weight
    n = header - 127;
    size = 1 + size_t(n + 1) / 2;
    if (size > len) return 0;
    for (int i = 0; i < n; ++i) w[size_t(i)] = (i % 2 ? in[1 + i / 2] : in[1 + i / 2] >> 4) & 15;
  } else {
    size = 1 + size_t(header);
    if (size > len) return 0;
    n = DecodeFseWeights(in + 1, header, w);
    if (n == 0) return 0;
  }
  // The last symbol's weight is what completes a power of two.
  std::array<int, kMaxWeight + 1> rank{};
  uint32_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (w[size_t(i)] > kMaxWeight) return 0;
    ++rank[w[size_t(i)]];
    total += (1u << w[size_t(i)]) >> 1;
  }
  if (total == 0) return 0;
  const int log = HighBit(total) + 1;
  if (log > kMaxTableLog) return 0;
  const uint32_t rest = (1u << log) - total;
  if ((rest & (rest - 1)) != 0) return 0;
  ++rank[HighBit(rest) + 1];
  if (rank[1] < 2 || rank[1] % 2) return 0;

  // Codes go in order of weight, lightest (longest) first (§4.2.1.3); the
  // rank[k] codes of weight k span 2^(k-1) entries each of a table of 2^log,
  // so 2^(k-1+11-log) of this one, and are log + 1 - k bits long.
  const int scale = kMaxTableLog - log;
  uint8_t* entry = t.data();
  for (int k = 1; k <= log; ++k) {
    const size_t span = size_t(rank[k]) << (k - 1 + scale);
    std::memset(entry, log + 1 - k, span);
    entry += span;
  }
  return size;
}

// ---------------------------------------------------------------------------
// Huffman streams (§4.2.2).

struct Stream {
  const uint8_t* src;  // the stream's bytes, [src, src + size)
  size_t size;
  size_t count;  // the symbols it must decode to
  const uint8_t* lengths;
};

// Bits of the last byte above the first code: zeros and the start mark.
// REQUIRES: the last byte is not 0 (ReadLiterals lists no such stream).
uint32_t MarkBits(const Stream& s) { return 8 - uint32_t(HighBit(s.src[s.size - 1])); }
Position StartOf(const Stream& s) { return {s.src + s.size - 8, MarkBits(s)}; }

// Rounds of five codes that keep every 8-byte load inside the stream: a
// round reads at most 8 + 5 * 11 = 63 bits, so moves `ip` down by at most
// 7 bytes.
size_t SafeRounds(const Stream& s, Position p, size_t done) {
  if (p.ip < s.src + 7) return 0;
  return std::min(size_t(p.ip - s.src - 7) / 7 + 1, (s.count - done) / 5);
}

// Runs `rounds` rounds of five codes on each of kWays streams, interleaved
// so that their table lookups overlap. A code's length is all a round
// needs, and the length is the shift that moves past the code. Each
// stream's bits carry a 1 below the last bit loaded, which after the shifts
// tells how many bits the round read (every peek, at most 8 + 4 * 11 bits
// down, stays above it). The tables and positions are copied into locals
// that the compiler can keep in registers: eight streams' bits and two
// tables fill most of them.
// REQUIRES: kWays is 1, or a multiple of 4 whose streams 4k to 4k + 3 are
// one block's (and use one table).
template <int kWays>
__attribute__((always_inline)) inline void RunRounds(const Stream* s, Position* pos,
                                                     size_t rounds) {
  constexpr int kTables = kWays == 1 ? 1 : kWays / 4;
  constexpr int kPerTable = kWays / kTables;
  const uint8_t* lengths[kTables];
  for (int t = 0; t < kTables; ++t) lengths[t] = s[t * kPerTable].lengths;
  Position p[kWays];
  for (int g = 0; g < kWays; ++g) p[g] = pos[g];
  for (size_t r = 0; r < rounds; ++r) {
    uint64_t bits[kWays];
#pragma GCC unroll 16
    for (int g = 0; g < kWays; ++g) bits[g] = (LoadLE64(p[g].ip) | 1) << p[g].used;
#pragma GCC unroll 5
    for (int k = 0; k < 5; ++k) {
#pragma GCC unroll 16
      for (int g = 0; g < kWays; ++g) {
        bits[g] <<= lengths[g / kPerTable][bits[g] >> (64 - kMaxTableLog)];
      }
    }
#pragma GCC unroll 16
    for (int g = 0; g < kWays; ++g) {
      const uint32_t used = uint32_t(__builtin_ctzll(bits[g]));
      p[g].ip -= used >> 3;
      p[g].used = used & 7;
    }
  }
  for (int g = 0; g < kWays; ++g) pos[g] = p[g];
}

// The same, compiled for BMI2 where the CPU has it: its shifts by a
// register cost one instruction instead of three.
#if defined(__x86_64__) && defined(__GNUC__)
template <int kWays>
__attribute__((target("bmi2"))) void RunRoundsBmi2(const Stream* s, Position* p, size_t rounds) {
  RunRounds<kWays>(s, p, rounds);
}
template <int kWays>
void RunRoundsPortable(const Stream* s, Position* p, size_t rounds) {
  RunRounds<kWays>(s, p, rounds);
}
template <int kWays>
void Run(const Stream* s, Position* p, size_t rounds) {
  static const bool bmi2 = __builtin_cpu_supports("bmi2");
  if (bmi2) {
    RunRoundsBmi2<kWays>(s, p, rounds);
  } else {
    RunRoundsPortable<kWays>(s, p, rounds);
  }
}
#else
template <int kWays>
void Run(const Stream* s, Position* p, size_t rounds) {
  RunRounds<kWays>(s, p, rounds);
}
#endif

// Walks the codes [done, count) of `s` from `p` on, exactly, and says
// whether that reads exactly every bit of the stream.
bool Finish(const Stream& s, Position p, size_t done) {
  BackwardBits br;
  if (!br.Init(s.src, s.size)) return false;
  if (done > 0) br.Seek(8 * uint64_t(s.src + s.size - 8 - p.ip) + p.used - MarkBits(s));
  for (size_t i = done; i < s.count; ++i) {
    br.Skip(s.lengths[br.Peek(kMaxTableLog)]);
    if (br.Overread()) return false;
  }
  return br.AllRead();
}

// The codes [done, count) of one stream from `p` on: fast while it can,
// then exactly. REQUIRES: s.size >= 8.
bool CheckStream(const Stream& s, Position p, size_t done) {
  for (size_t rounds; (rounds = SafeRounds(s, p, done)) > 0; done += 5 * rounds) {
    Run<1>(&s, &p, rounds);
  }
  return Finish(s, p, done);
}

// One whole stream; one too short for the fast walk goes exactly.
bool CheckStream(const Stream& s) {
  return s.size < 8 ? Finish(s, {}, 0) : CheckStream(s, StartOf(s), 0);
}

// Rounds that every one of n streams can run fast.
size_t CommonRounds(const Stream* s, const Position* p, int n, size_t done) {
  size_t rounds = SafeRounds(s[0], p[0], done);
  for (int g = 1; g < n; ++g) rounds = std::min(rounds, SafeRounds(s[g], p[g], done));
  return rounds;
}

// kWays streams side by side from `p` on, `done` codes into each, while
// all of them can go fast, then each alone.
template <int kWays>
bool ContinueStreams(const Stream* s, Position* p, size_t done) {
  for (size_t rounds; (rounds = CommonRounds(s, p, kWays, done)) > 0;) {
    Run<kWays>(s, p, rounds);
    done += 5 * rounds;
  }
  for (int g = 0; g < kWays; ++g) {
    if (!CheckStream(s[g], p[g], done)) return false;
  }
  return true;
}

bool AnyShort(const Stream* s, int n) {
  return std::any_of(s, s + n, [](const Stream& t) { return t.size < 8; });
}

// kWays streams side by side from their starts.
template <int kWays>
bool CheckStreams(const Stream* s) {
  if (AnyShort(s, kWays)) {
    return std::all_of(s, s + kWays, [](const Stream& t) { return CheckStream(t); });
  }
  Position p[kWays];
  for (int g = 0; g < kWays; ++g) p[g] = StartOf(s[g]);
  return ContinueStreams<kWays>(s, p, 0);
}

// kWays streams (kWays / 4 blocks' four) with the vector walk while all of
// them can go fast, then eight at a time as above. Streams of several
// codes, or of a code SplitLengthTable cannot split, go eight at a time
// from the start. REQUIRES: UseAvx512Walk(); kWays is 32 or 64.
template <int kWays>
bool CheckStreamsAvx512(const Stream* s) {
  const uint8_t* lengths = s[0].lengths;
  SplitLengths split;
  if (AnyShort(s, kWays) ||
      std::any_of(s, s + kWays, [&](const Stream& t) { return t.lengths != lengths; }) ||
      !SplitLengthTable(lengths, split)) {
    for (int i = 0; i < kWays; i += 8) {
      if (!CheckStreams<8>(s + i)) return false;
    }
    return true;
  }
  Position p[kWays];
  for (int g = 0; g < kWays; ++g) p[g] = StartOf(s[g]);
  size_t done = 0;
  for (size_t rounds; (rounds = CommonRounds(s, p, kWays, done)) > 0;) {
    WalkRoundsAvx512<kWays / 8>(split, p, rounds);
    done += 5 * rounds;
  }
  for (int i = 0; i < kWays; i += 8) {
    if (!ContinueStreams<8>(s + i, p + i, done)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Frames and blocks (§3.1.1).

// The streams listed and not yet checked, and the code lengths they use: so
// few that the tables stay in cache, and a frame of many small blocks, each
// with a code of its own, takes no more memory than one of large blocks.
struct Scratch {
  static constexpr size_t kMaxTables = 16, kMaxStreams = 64;
  std::vector<Stream> quads;        // the four streams of each block, in turn
  std::vector<Stream> singles;      // blocks of one stream
  std::vector<LengthTable> tables;  // capacity kMaxTables: streams keep their addresses

  Scratch() {
    quads.reserve(kMaxStreams + 4);
    singles.reserve(kMaxStreams + 1);
    tables.reserve(kMaxTables);
  }
  size_t streams() const { return quads.size() + singles.size(); }
  void Clear() {
    quads.clear();
    singles.clear();
    tables.clear();
  }
  // Checks the listed streams, sixteen or eight blocks at a time with the
  // AVX-512 walk or two at a time without it where it can, and forgets all
  // tables but the last, which a Treeless_Literals_Block may still use.
  bool Check() {
    size_t i = 0;
    if (UseAvx512Walk()) {
      for (; i + 64 <= quads.size(); i += 64) {
        if (!CheckStreamsAvx512<64>(quads.data() + i)) return false;
      }
      if (i + 32 <= quads.size()) {
        if (!CheckStreamsAvx512<32>(quads.data() + i)) return false;
        i += 32;
      }
    }
    for (; i + 8 <= quads.size(); i += 8) {
      if (!CheckStreams<8>(quads.data() + i)) return false;
    }
    if (i < quads.size() && !CheckStreams<4>(quads.data() + i)) return false;
    for (const Stream& s : singles) {
      if (!CheckStream(s)) return false;
    }
    quads.clear();
    singles.clear();
    if (tables.size() > 1) tables.erase(tables.begin(), tables.end() - 1);
    return true;
  }
};

// The literals section of a compressed block (§3.1.1.3.1) at b[0, size),
// followed by an empty Sequences_Section. Huffman streams are added to
// `scratch`. Returns the literals' count, or -1 where it cannot tell.
int64_t ReadLiterals(const uint8_t* b, size_t size, size_t block_max, size_t out_left,
                     Scratch& scratch) {
  LiteralsHeader h;
  if (!ReadLiteralsOnlyBlock(b, size, h)) return -1;
  const int type = h.type, streams = h.streams;
  const size_t header = h.header, regenerated = h.regenerated;
  size_t compressed = h.content;
  if (regenerated > block_max || regenerated > out_left) return -1;
  if (type < 2) return int64_t(regenerated);
  if (regenerated == 0) return -1;
  const uint8_t* p = b + header;
  if (type == 2) {  // Compressed_Literals_Block: a new code
    if (scratch.tables.size() == Scratch::kMaxTables && !scratch.Check()) return -1;
    scratch.tables.emplace_back();
    const size_t tree = ReadHuffmanTree(p, compressed, scratch.tables.back());
    if (tree == 0 || tree >= compressed) return -1;
    p += tree;
    compressed -= tree;
  } else if (scratch.tables.empty()) {  // Treeless_Literals_Block: the last code
    return -1;
  }
  const uint8_t* lengths = scratch.tables.back().data();
  // A stream is at least its last byte, which holds the start mark (§4.2.2);
  // the walks below rely on that mark.
  auto malformed = [](const uint8_t* q, size_t n) { return n == 0 || q[n - 1] == 0; };
  if (streams == 1) {
    if (malformed(p, compressed)) return -1;
    scratch.singles.push_back({p, compressed, regenerated, lengths});
    return int64_t(regenerated);
  }
  if (regenerated < 6 || compressed < 10) return -1;
  const size_t s1 = GetU16(p), s2 = GetU16(p + 2), s3 = GetU16(p + 4);
  if (6 + s1 + s2 + s3 >= compressed) return -1;
  const size_t sizes[4] = {s1, s2, s3, compressed - 6 - s1 - s2 - s3};
  const size_t segment = (regenerated + 3) / 4;
  const uint8_t* q = p + 6;
  for (int k = 0; k < 4; ++k) {
    if (malformed(q, sizes[k])) return -1;
    const size_t count = k < 3 ? segment : regenerated - 3 * segment;
    scratch.quads.push_back({q, sizes[k], count, lengths});
    q += sizes[k];
  }
  return int64_t(regenerated);
}

bool CheckFrame(const uint8_t* in, size_t len, size_t n, Scratch& scratch) {
  if (len < 6 || GetU32(in) != ZSTD_MAGICNUMBER) return false;
  const uint8_t descriptor = in[4];
  const int content_size_flag = descriptor >> 6;
  const bool single_segment = (descriptor >> 5) & 1;
  // Reserved bit, Content_Checksum_Flag, Dictionary_ID_Flag.
  if (descriptor & 0x0f) return false;
  size_t pos = 5;
  uint64_t window = 0;
  if (!single_segment) {
    const uint8_t wd = in[pos++];
    const uint64_t base = uint64_t{1} << (10 + (wd >> 3));
    window = base + (base / 8) * (wd & 7);
  }
  const size_t fcs_size =
      content_size_flag == 0 ? (single_segment ? 1 : 0) : size_t{1} << content_size_flag;
  if (fcs_size == 0 || len - pos < fcs_size) return false;
  uint64_t content = 0;
  for (size_t i = fcs_size; i-- > 0;) content = content << 8 | in[pos + i];
  if (fcs_size == 2) content += 256;
  pos += fcs_size;
  if (single_segment) window = content;
  if (content != n || window > kMaxZstdWindow) return false;
  const size_t block_max = size_t(std::min<uint64_t>(window, kZstdBlockMax));

  size_t decoded = 0;
  for (BlockHeader b; !b.last;) {
    if (!ReadBlockHeader(in, len, pos, block_max, b)) return false;
    if (b.type == 2) {
      if (b.size >= kZstdBlockMax) return false;  // libzstd's bound on a compressed block
      const int64_t got = ReadLiterals(in + pos, b.size, block_max, n - decoded, scratch);
      if (got < 0) return false;
      decoded += size_t(got);
    } else {
      if (b.size > n - decoded) return false;
      decoded += b.size;
    }
    pos += b.stored;
    if (scratch.streams() >= Scratch::kMaxStreams && !scratch.Check()) return false;
  }
  return pos == len && decoded == n && scratch.Check();
}

}  // namespace

bool LiteralsOnlyFrameDecodes(const uint8_t* in, size_t len, size_t n) {
  thread_local Scratch scratch;
  scratch.Clear();
  return CheckFrame(in, len, n, scratch);
}

}  // namespace ckfmt
