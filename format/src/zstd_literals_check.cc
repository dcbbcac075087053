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
#include "zstd_huffman.h"       // HuffmanCode, BackwardBits, CutHuffmanStreams
#include "zstd_literals_walk.h"  // Position, the AVX-512 walk

namespace ckfmt {
namespace {

// ---------------------------------------------------------------------------
// Code lengths. Only lengths decide whether a stream decodes to a given
// number of symbols with every bit read, so the table maps the next 11 bits,
// whatever the code's own length, to that code's length.

using LengthTable = std::array<uint8_t, 1 << kMaxCodeBits>;

// Reads a Huffman_Tree_Description (§4.2.1) from in[0, len) into `t`.
// Returns the bytes it takes, or 0 where it cannot tell.
size_t ReadHuffmanTree(const uint8_t* in, size_t len, LengthTable& t) {
  HuffmanCode code;
  const size_t size = ReadHuffmanCode(in, len, code);
  if (size == 0) return 0;
  ForEachCode(code, [&](int, int length, uint32_t first, uint32_t count) {
    std::memset(t.data() + first, length, count);
  });
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
        bits[g] <<= lengths[g / kPerTable][bits[g] >> (64 - kMaxCodeBits)];
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

template <int kWays>
void Run(const Stream* s, Position* p, size_t rounds) {
  RunWithBmi2<RunRounds<kWays>>(s, p, rounds);
}

// Walks the codes [done, count) of `s` from `p` on, exactly, and says
// whether that reads exactly every bit of the stream.
bool Finish(const Stream& s, Position p, size_t done) {
  BackwardBits br;
  if (!br.Init(s.src, s.size)) return false;
  if (done > 0) br.Seek(8 * uint64_t(s.src + s.size - 8 - p.ip) + p.used - MarkBits(s));
  for (size_t i = done; i < s.count; ++i) {
    br.Skip(s.lengths[br.Peek(kMaxCodeBits)]);
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

// The vector kernels (zstd_literals_walk.h), each with the form of the
// code it takes: kWays streams, kWays / 4 blocks' four, at once.
struct Avx512Walk {
  using Table = SplitLengths;
  static bool Prepare(const uint8_t* lengths, Table& t) { return SplitLengthTable(lengths, t); }
  template <int kWays>
  static void Rounds(const Table& t, Position* p, size_t rounds) {
    WalkRoundsAvx512<kWays / 8>(t, p, rounds);
  }
};
struct Avx2Walk {
  using Table = LengthThresholds;
  static bool Prepare(const uint8_t* lengths, Table& t) { return ThresholdsOf(lengths, t); }
  template <int kWays>
  static void Rounds(const Table& t, Position* p, size_t rounds) {
    WalkRoundsAvx2<kWays / 16>(t, p, rounds);
  }
};

// kWays streams with the vector walk while all of them can go fast, then
// eight at a time as above. Streams of several codes, or of a code the
// kernel cannot take, go eight at a time from the start.
// REQUIRES: the kernel runs here; kWays is one it takes.
template <typename Walk, int kWays>
bool CheckStreamsVector(const Stream* s) {
  const uint8_t* lengths = s[0].lengths;
  typename Walk::Table table;
  if (AnyShort(s, kWays) ||
      std::any_of(s, s + kWays, [&](const Stream& t) { return t.lengths != lengths; }) ||
      !Walk::Prepare(lengths, table)) {
    for (int i = 0; i < kWays; i += 8) {
      if (!CheckStreams<8>(s + i)) return false;
    }
    return true;
  }
  Position p[kWays];
  for (int g = 0; g < kWays; ++g) p[g] = StartOf(s[g]);
  size_t done = 0;
  for (size_t rounds; (rounds = CommonRounds(s, p, kWays, done)) > 0;) {
    Walk::template Rounds<kWays>(table, p, rounds);
    done += 5 * rounds;
  }
  for (int i = 0; i < kWays; i += 8) {
    if (!ContinueStreams<8>(s + i, p + i, done)) return false;
  }
  return true;
}

// The streams of quads[*i, n) in runs of kWide, then one of kNarrow, with
// the vector walk; *i is moved past them.
template <typename Walk, int kWide, int kNarrow>
bool CheckStreamsVector(const Stream* quads, size_t n, size_t* i) {
  for (; *i + kWide <= n; *i += kWide) {
    if (!CheckStreamsVector<Walk, kWide>(quads + *i)) return false;
  }
  if (*i + kNarrow <= n) {
    if (!CheckStreamsVector<Walk, kNarrow>(quads + *i)) return false;
    *i += kNarrow;
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
  // Checks the listed streams, sixteen or eight blocks at a time with a
  // vector walk (AVX-512 or AVX2) or two at a time without one where it
  // can, and forgets all tables but the last, which a
  // Treeless_Literals_Block may still use.
  bool Check() {
    size_t i = 0;
    const WalkKind walk = CurrentWalk();
    if (walk == WalkKind::kAvx512 &&
        !CheckStreamsVector<Avx512Walk, 64, 32>(quads.data(), quads.size(), &i)) {
      return false;
    }
    if (walk == WalkKind::kAvx2 &&
        !CheckStreamsVector<Avx2Walk, 64, 32>(quads.data(), quads.size(), &i)) {
      return false;
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
  HuffmanStream cut[4];
  if (!CutHuffmanStreams(p, compressed, regenerated, streams, cut)) return -1;
  std::vector<Stream>& list = streams == 1 ? scratch.singles : scratch.quads;
  for (int k = 0; k < streams; ++k)
    list.push_back({cut[k].src, cut[k].size, cut[k].count, lengths});
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
