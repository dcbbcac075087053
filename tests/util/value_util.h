// Engine-level test helpers: deterministic tensors and state dicts, deep
// bitwise comparison of values, log capture.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ckfmt/log.h"
#include "ckfmt/reader.h"
#include "ckfmt/state_dict.h"
#include "ckfmt/tensor.h"
#include "ckfmt/writer.h"

// Readable names for parameterized tests.
namespace ckfmt {
inline void PrintTo(Codec c, std::ostream* os) { *os << CodecName(static_cast<uint8_t>(c)); }
}  // namespace ckfmt

namespace ckfmt_test {

extern const std::vector<ckfmt::DType> kAllDTypes;

// Deterministic pseudo-random bytes. Bool tensors get 0/1 (spec W6).
void FillRandom(void* p, size_t n, uint64_t seed);
ckfmt::Tensor RandomTensor(ckfmt::DType dtype, const ckfmt::Shape& shape, uint64_t seed);
std::string TensorBytes(const ckfmt::Tensor& t);
// Sum of nbytes() over every tensor of `v`, wherever it lives.
uint64_t TotalTensorBytes(const ckfmt::Value& v);
std::string RandomString(size_t n, uint64_t seed);

// Whole-tensor bytes of a global tensor of `shape`, element g = bytes
// [g*esize, (g+1)*esize).
ckfmt::Tensor ShardOf(const ckfmt::Tensor& whole, const ckfmt::Region& region);

double DoubleFromBits(uint64_t bits);

// A state dict exercising every value kind, every dtype, odd shapes, multi-
// chunk tensors (for chunk sizes of a few KiB), nested dicts and lists with
// awkward keys, and empty containers.
ckfmt::Value MakeRichStateDict(uint64_t seed);

// A structural copy of `v` whose tensors are fresh zeroed tensors of the same
// dtype/shape/shard, whose scalars are changed, and whose bytes are empty.
ckfmt::Value ZeroedLike(const ckfmt::Value& v);

// "" if a and b are equal bit for bit (tensor bytes, float bits, dict key
// order when `dict_order`), else where and how they first differ.
std::string DiffValues(const ckfmt::Value& a, const ckfmt::Value& b, bool dict_order = true);
::testing::AssertionResult ValuesBitwiseEqual(const ckfmt::Value& a, const ckfmt::Value& b,
                                              bool dict_order = true);

// Every path below `root` in pre-order (VisitValues order).
std::vector<ckfmt::KeyPath> AllPaths(const ckfmt::Value& root);
// Paths of tensors, bytes and scalars (non-containers).
std::vector<ckfmt::KeyPath> LeafPaths(const ckfmt::Value& root);
bool ContainsPath(const std::vector<ckfmt::KeyPath>& paths, const ckfmt::KeyPath& p);
std::string PathsToString(const std::vector<ckfmt::KeyPath>& paths);
// Whether `message` names `path` (FormatKeyPath or DottedKeyPath form).
bool MentionsPath(const std::string& message, const ckfmt::KeyPath& path);

// A checkpoint's entries in index order with each piece's chunks (stored
// and raw size, checksum, codec), without their offsets: equal for files
// that hold the same encoded chunks, wherever in the data region they lie.
// "" (and a test failure) if the file does not open.
std::string StoredChunksByEntry(const std::string& path);

// Save options with small chunks and blocks, so a few hundred KiB exercise
// chunking, block boundaries and staging wrap-around.
ckfmt::SaveOptions SmallSaveOptions(ckfmt::Codec codec = ckfmt::Codec::kNone);
ckfmt::ReadOptions SmallReadOptions();
// No fsync: tests do not need durability (crash tests do their own).
constexpr uint64_t kSmallChunk = 4096 * 3;

// Collects log messages while alive (restores the default sink after).
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  std::vector<std::pair<ckfmt::LogLevel, std::string>> messages() const;
  size_t CountContaining(ckfmt::LogLevel level, const std::string& needle) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<ckfmt::LogLevel, std::string>> messages_;
};

// Names in `names` that contain ".tmp." (writer temporaries).
std::vector<std::string> TempNames(const std::vector<std::string>& names);

// After a failed save to `path` in directory `dir`: the file holds
// `before`, byte for byte, and no writer temporary is left beside it.
void ExpectPreviousFileKept(const std::string& dir, const std::string& path,
                            const std::string& before);

}  // namespace ckfmt_test

// ASSERT_OK / EXPECT_OK for Status and Result<T>.
namespace ckfmt_test::internal {
inline const ckfmt::Status& ToStatus(const ckfmt::Status& s) { return s; }
template <typename T>
ckfmt::Status ToStatus(const ckfmt::Result<T>& r) {
  return r.status();
}
}  // namespace ckfmt_test::internal
#define CKFMT_EXPECT_OK(expr)                                               \
  do {                                                                      \
    const ::ckfmt::Status _s = ::ckfmt_test::internal::ToStatus((expr));   \
    EXPECT_TRUE(_s.ok()) << #expr << ": " << _s.ToString();                \
  } while (0)
#define CKFMT_ASSERT_OK(expr)                                               \
  do {                                                                      \
    const ::ckfmt::Status _s = ::ckfmt_test::internal::ToStatus((expr));   \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.ToString();                \
  } while (0)
