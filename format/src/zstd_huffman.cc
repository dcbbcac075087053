// See zstd_huffman.h. Section numbers are RFC 8878's. Where the RFC leaves
// a choice to the decoder, this one takes the narrower reading and cannot
// tell, so that libzstd, the reference, decides.
#include "zstd_huffman.h"

#include "ckfmt/file_layout.h"  // GetU16

namespace ckfmt {

bool BackwardBits::Init(const uint8_t* p, size_t size) {
  if (size == 0 || p[size - 1] == 0) return false;
  p_ = p;
  avail_ = 8 * uint64_t(size - 1) + uint64_t(HighBit(p[size - 1]));
  consumed_ = 0;
  return true;
}

uint32_t BackwardBits::Peek(int k) const {
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

namespace {

constexpr int kMaxWeightLog = 6;  // the weights' FSE accuracy (§4.2.1.2)
constexpr int kMaxWeight = 12;    // libzstd refuses heavier weights

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

}  // namespace

size_t ReadHuffmanCode(const uint8_t* in, size_t len, HuffmanCode& code) {
  if (len == 0) return 0;
  Weights& w = code.weight;
  w.fill(0);
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
  if (log > kMaxCodeBits) return 0;
  const uint32_t rest = (1u << log) - total;
  if ((rest & (rest - 1)) != 0) return 0;
  w[size_t(n)] = uint8_t(HighBit(rest) + 1);
  ++rank[w[size_t(n)]];
  if (rank[1] < 2 || rank[1] % 2) return 0;
  code.log = log;
  code.symbols = n + 1;
  return size;
}

bool CutHuffmanStreams(const uint8_t* in, size_t size, size_t regenerated, int streams,
                       HuffmanStream* out) {
  // A stream is at least its last byte, which holds the start mark (§4.2.2).
  auto malformed = [](const uint8_t* q, size_t n) { return n == 0 || q[n - 1] == 0; };
  if (regenerated == 0) return false;
  if (streams == 1) {
    if (malformed(in, size)) return false;
    out[0] = {in, size, regenerated};
    return true;
  }
  if (regenerated < 6 || size < 10) return false;
  const size_t s1 = GetU16(in), s2 = GetU16(in + 2), s3 = GetU16(in + 4);
  if (6 + s1 + s2 + s3 >= size) return false;
  const size_t sizes[4] = {s1, s2, s3, size - 6 - s1 - s2 - s3};
  const size_t segment = (regenerated + 3) / 4;
  const uint8_t* q = in + 6;
  for (int k = 0; k < 4; ++k) {
    if (malformed(q, sizes[k])) return false;
    out[k] = {q, sizes[k], k < 3 ? segment : regenerated - 3 * segment};
    q += sizes[k];
  }
  return true;
}

}  // namespace ckfmt
