// The object model of the restricted unpickler: what a pickle builds when
// nothing in it is executed. Whitelisted torch constructs are interpreted
// into plain values (dicts, tensors, storages); globals outside the
// whitelist (only when the caller allows opaque objects) stay symbolic as
// kGlobal/kCall nodes that can be re-serialized but never run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckfmt/dtype.h"
#include "ckfmt/status.h"

namespace ckfmt::convert::py {

struct Object;
using Ref = std::shared_ptr<Object>;

enum class Kind : uint8_t {
  kNone, kBool, kInt, kBigInt, kFloat, kStr, kBytes,
  kTuple, kList, kSet, kDict,
  kGlobal,    // module.name (whitelisted, or `disallowed` when opaque objects are allowed)
  kCall,      // symbolic application of a disallowed callable (REDUCE/NEWOBJ/INST/OBJ)
  kInstance,  // a whitelisted class built by NEWOBJ (the DCP metadata dataclasses)
  kStorage,   // a torch storage from a persistent id
  kTensor,    // torch._utils._rebuild_tensor*(...)
};
const char* KindName(Kind k);

struct Storage {
  std::string key;        // record "data/<key>" (zip) or storage key (legacy)
  DType dtype = DType::kU8;
  bool untyped = false;   // torch.UntypedStorage: numel counts bytes
  uint64_t numel = 0;     // elements of `dtype` (bytes when untyped)
  std::string location;   // "cpu", "cuda:0", ...
  uint64_t view_offset = 0;  // legacy view: element offset into the root storage
};

struct TensorRef {
  std::shared_ptr<Object> storage;  // kStorage
  DType dtype = DType::kU8;         // the tensor's dtype
  uint64_t offset = 0;              // storage offset, in elements of dtype
  std::vector<uint64_t> size;
  std::vector<uint64_t> stride;     // in elements of dtype
};

// A DCP .metadata makes tens of these per tensor: the small fields share
// the first word.
struct Object {
  Kind kind = Kind::kNone;
  bool b = false;
  bool disallowed = false;            // kGlobal outside the whitelist
  uint8_t graph_mark = 0;             // CheckGraph's visit state (0 before it runs)
  bool kept = false;                  // the unpickler holds it to the end (KeepMutated)
  bool attributes_dropped = false;    // kTensor: its rebuild set Python attributes
  uint16_t graph_height = 0;          // CheckGraph: objects on the longest path down from here
  int64_t i = 0;
  double f = 0;
  std::string s;         // kStr (UTF-8), kBytes, kBigInt (little-endian two's complement),
                         // kGlobal/kInstance module, kCall "reduce"/"newobj",
                         // kDict "collections.OrderedDict" for one
  std::string s2;        // kGlobal/kInstance name; for the converter's notes, on a value
                         // that stands in for another Python type its name ("complex",
                         // "slice", "bytearray", "torch.Size", "torch.device"; a kTensor
                         // "torch.nn.Parameter")
  std::vector<Ref> items;             // tuple/list/set; kCall: {callable, args...} extra appends
  std::vector<std::pair<Ref, Ref>> dict;  // kDict; kCall/kInstance: SETITEMS on the object
  Ref callable, args;                 // kCall
  Ref state;                          // kCall/kInstance/kDict: BUILD state (a kDict's:
                                      // an OrderedDict's attributes, such as _metadata)
  std::shared_ptr<Storage> storage;   // kStorage
  std::shared_ptr<TensorRef> tensor;  // kTensor

  std::string GlobalName() const { return s + "." + s2; }
  // kInstance: the attribute from a dict state, or nullptr.
  const Object* Attr(const std::string& name) const;
};

Ref MakeNone();
Ref MakeBool(bool v);
Ref MakeInt(int64_t v);
Ref MakeFloat(double v);
Ref MakeStr(std::string v);
Ref MakeBytes(std::string v);
Ref Make(Kind k);

// A string for using `o` as a dict key with Python's equality for the
// scalar kinds torch uses (str, int, bool, float, None, tuples of those);
// other kinds, and tuples nested deeper than kMaxDepth, compare by identity.
std::string KeyOf(const Object& o, int depth = 0);

// Human-readable short description ("int 3", "str 'abc'", "global os.system").
std::string Describe(const Object& o, int depth = 0);

// Deepest object graph a pickle may build: what nests deeper is refused,
// so that code walking the graph (and shared_ptr's destructors) recurses
// at most this far.
inline constexpr int kMaxDepth = 1000;

// OK if the graphs below `roots` are acyclic and no path in them holds
// more than kMaxDepth objects, whatever order the roots come in; otherwise
// Unsupported, naming `where`. Walks without recursion. REQUIRES: the
// objects' graph_mark and graph_height are 0 (as made); they are left set.
Status CheckGraph(const std::vector<Ref>& roots, const std::string& where);

// Releases the graphs below `roots` without recursion, cycles included:
// for a graph CheckGraph refused, where the destructors would not.
void Dismantle(std::vector<Ref> roots);

// True if `o` or anything below it is a symbolic (disallowed) object; fills
// `name` with the first disallowed global found.
bool ContainsDisallowed(const Object& o, std::string* name, int depth = 0);

}  // namespace ckfmt::convert::py
