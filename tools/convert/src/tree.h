// The converter's neutral model of a checkpoint: a tree of values whose
// tensors are read lazily, piece by piece, from the source file. Every
// reader builds one; every writer consumes one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckfmt/dtype.h"
#include "ckfmt/index.h"
#include "ckfmt/key_path.h"
#include "ckfmt/region.h"
#include "ckfmt/status.h"
#include "pickle_object.h"

namespace ckfmt::convert {

// Receives one piece of a tensor: `region` (a box in the tensor's
// coordinates) and its row-major stream; `data` is valid during the call.
using PieceFn = std::function<Status(const Region& region, uint32_t rank, const void* data,
                                     uint64_t nbytes)>;

// The memory tensor pieces are read into, kept from one tensor to the next
// by whoever drives the streaming (one per conversion). Fresh buffers per
// tensor cost more than the reading: the kernel faulted in and cleared
// every page, and a vector zeroed it again (a 1.5 GiB torch.save file
// converted with 2.0-2.3 s of system time, 0.8-0.9 s with reuse).
class PieceMemory {
 public:
  // Buffer ids: each read-ahead slot (0, 1) has one for the piece itself
  // (which = 0) and one for the storage span it is gathered from (1).
  static constexpr int kBuffers = 4;
  static constexpr int Id(int slot, int which) { return 2 * slot + which; }

  // REQUIRES: budget > 0.
  explicit PieceMemory(uint64_t budget) : budget_(budget) {}
  // Bytes per piece that sources aim for (a single element may exceed it).
  uint64_t budget() const { return budget_; }
  // At least `n` bytes, valid until the next call with `id`. While requests
  // fit, they get the same bytes, contents kept; a larger one gets fresh,
  // uninitialized bytes. Calls with different ids may come from different
  // threads.
  // REQUIRES: 0 <= id < kBuffers.
  uint8_t* Buffer(int id, uint64_t n);

 private:
  uint64_t budget_;
  std::unique_ptr<uint8_t[]> data_[kBuffers];
  uint64_t capacity_[kBuffers] = {};
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  DType dtype = DType::kU8;
  Shape shape;
  std::vector<ShardRecord> saved_layout;  // where the data lived at save time
  bool partial = false;                   // pieces need not cover the tensor
  // Emits pieces that together cover the tensor exactly once, each holding
  // at most about memory.budget() bytes, read into `memory`.
  virtual Status Stream(PieceMemory& memory, const PieceFn& fn) = 0;
  // Sources that read any box of the tensor directly (a ckfmt file) say so,
  // and StreamBox then emits boxes (in the tensor's coordinates) that cover
  // `box` exactly once, as Stream does the whole tensor.
  // REQUIRES for StreamBox: CanStreamBoxes(); `box` is a box within shape.
  virtual bool CanStreamBoxes() const { return false; }
  virtual Status StreamBox(PieceMemory& memory, const Region& box, const PieceFn& fn);
  uint64_t nbytes() const;
};

// Reads bytes [offset, offset + n) of a storage.
using StorageReadFn = std::function<Status(uint64_t offset, void* dst, uint64_t n)>;

// A tensor that views a storage with an element offset and strides (torch's
// layout): views, slices, transposes and expanded tensors are materialized
// into row-major pieces. Reads only the storage span each piece needs.
class StridedTensorSource : public TensorSource {
 public:
  // `where` names the tensor in messages. Checks that every element lies in
  // the storage's `storage_bytes`.
  static Result<std::shared_ptr<TensorSource>> Create(
      DType dtype, Shape shape, std::vector<uint64_t> stride, uint64_t offset,
      uint64_t storage_bytes, StorageReadFn read, std::string where);
  Status Stream(PieceMemory& memory, const PieceFn& fn) override;
  uint32_t rank = 0;

 private:
  std::vector<uint64_t> stride_;
  uint64_t offset_ = 0;
  StorageReadFn read_;
  std::string where_;
};

// Loads `box` into read-ahead slot `slot` (0 or 1) and returns its
// row-major stream.
using LoadFn = std::function<Status(const Region& box, int slot, const uint8_t** data,
                                    uint64_t* nbytes)>;
// Calls load for each box and fn with the result, loading box i+1 on a
// second thread while fn consumes box i (at most two boxes in memory).
Status StreamWithReadAhead(const std::vector<Region>& boxes, uint32_t rank, const LoadFn& load,
                           const PieceFn& fn);

// Splits a tensor of `shape` into boxes for which cost(box) <= budget where
// possible, splitting dimensions in `order` (most significant first), and
// calls emit for each in order.
Status SplitBoxes(const Shape& shape, const std::vector<size_t>& order, uint64_t budget,
                  const std::function<uint64_t(const Region&)>& cost,
                  const std::function<Status(const Region&)>& emit);
// The same for the box `box` of a tensor: sub-boxes in the tensor's
// coordinates.
Status SplitBox(const Region& box, const std::vector<size_t>& order, uint64_t budget,
                const std::function<uint64_t(const Region&)>& cost,
                const std::function<Status(const Region&)>& emit);

// How deep a dict's attributes may nest to be kept (Node::attributes).
inline constexpr int kMaxAttributeDepth = 16;

struct Node {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kBytes, kTensor, kDict, kList };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;             // kStr; kBytes: the blob
  std::string content_type;  // kBytes
  std::shared_ptr<TensorSource> tensor;
  std::vector<std::pair<std::string, Node>> children;  // kDict: keys; kList: keys unused
  bool int_keys = false;     // kDict whose keys were Python ints (optimizer state)
  bool is_tuple = false;     // kList that was a Python tuple
  bool ordered = false;      // kDict that was a collections.OrderedDict
  std::string attributes;    // kDict: JSON object of its attributes (a state dict's
                             // _metadata), where they were plain values and nest at
                             // most kMaxAttributeDepth deep; else empty
  bool partial = false;      // kBytes of which the source holds only part: `s` is empty

  // Declared here, defaulted below: with libstdc++'s std::pair, Clang
  // checks the implicit ones while Node is still incomplete, and fails.
  Node();
  Node(const Node&);
  Node(Node&&) noexcept;
  Node& operator=(const Node&);
  Node& operator=(Node&&) noexcept;
  ~Node();

  static Node Dict();
  static Node List();
};

inline Node::Node() = default;
inline Node::Node(const Node&) = default;
inline Node::Node(Node&&) noexcept = default;
inline Node& Node::operator=(const Node&) = default;
inline Node& Node::operator=(Node&&) noexcept = default;
inline Node::~Node() = default;

inline Node Node::Dict() {
  Node n;
  n.kind = Kind::kDict;
  return n;
}
inline Node Node::List() {
  Node n;
  n.kind = Kind::kList;
  return n;
}

// Deepest tree the converter builds: sources that nest deeper (Python
// objects, keys split on '.') are refused or kept flat, so that walking a
// tree (and destroying it) never recurses further.
inline constexpr int kMaxTreeDepth = 100;

// True if splitting `key` on '.' would nest deeper than kMaxTreeDepth:
// readers keep such a key whole.
inline bool SplitsTooDeep(const std::string& key) {
  size_t dots = 0;
  for (char c : key) dots += c == '.';
  return dots >= size_t(kMaxTreeDepth);
}

// OK if no path in the tree is deeper than kMaxTreeDepth and every key,
// string and content type is valid UTF-8, as ckfmt and safetensors require
// of their strings; otherwise an error naming `where` and the key.
Status CheckTree(const Node& root, const std::string& where);

// The refusal of an output that must hold `key`'s partial bytes entry whole.
inline Status PartialBytesRefused(const std::string& key) {
  return Status::Unsupported(key + ": bytes entry is partial (not every byte was saved); " +
                             "this output needs whole values");
}

// Notes and dropped entries collected along the way.
struct ConvertLog {
  std::vector<std::pair<std::string, std::string>> dropped;  // (key, reason)
  std::vector<std::string> notes;
  void Note(const std::string& n) {
    if (notes.size() < 200) notes.push_back(n);
  }
};

struct PyToTreeOptions {
  bool allow_opaque = false;
  std::string where;
  std::function<Result<std::shared_ptr<TensorSource>>(const py::TensorRef&, const std::string& key)>
      make_tensor;
};

// Converts an unpickled object into a tree value. Python dicts, lists,
// tuples and sets become dicts and lists; non-string keys become strings
// (int keys are remembered); symbolic objects become opaque "pickle" bytes
// when allowed.
Result<Node> PyToTree(const py::Ref& obj, const PyToTreeOptions& options, ConvertLog* log,
                      const std::string& key = "");

// Sum of the tensor (and blob) bytes below `n`.
uint64_t TreeBytes(const Node& n);

// The dotted name of a path below the root for messages.
std::string JoinKey(const std::string& parent, const std::string& child);

// `key` in double quotes for a message, cut after its first 200 bytes (at
// a UTF-8 character boundary) with its length noted: hostile inputs carry
// keys of megabytes, and a message that quotes one whole is no message.
std::string QuoteKey(std::string_view key);
// A dotted key path for a message: QuoteKey(key), or <root> when empty.
std::string KeyForMessage(const std::string& key);
// The first three keys of a list for a message ("a", "b", "c" and 5 more);
// all of them when there are four or fewer.
std::string NameSomeKeys(const std::vector<std::string>& keys);

}  // namespace ckfmt::convert
