// Emits pickle opcodes. Used to write torch.save's data.pkl (protocol 2,
// only the globals torch.load(weights_only=True) accepts) and to
// re-serialize opaque objects without executing them.
#pragma once

#include <cstdint>
#include <string>

#include "ckfmt/status.h"
#include "pickle_object.h"

namespace ckfmt::convert {

class PickleWriter {
 public:
  explicit PickleWriter(int protocol = 2);  // writes PROTO
  void None();
  void Bool(bool v);
  void Int(int64_t v);
  void BigInt(const std::string& le_twos_complement);
  void Float(double v);
  void Str(const std::string& utf8);
  // protocol >= 3: BINBYTES; protocol 2: _codecs.encode(<latin-1 text>, "latin1")
  void Bytes(const std::string& b);
  void Global(const std::string& module, const std::string& name);
  void Mark();
  void Tuple();        // from the last mark
  void EmptyTuple();
  void EmptyDict();
  void EmptyList();
  void SetItems();     // from the last mark
  void Appends();      // from the last mark
  void Reduce();
  void NewObj();
  void Build();
  void BinPersId();
  void Stop();
  const std::string& data() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Op(uint8_t op) { out_.push_back(static_cast<char>(op)); }
  void U32(uint32_t v);
  int protocol_;
  std::string out_;
};

// Serializes `o` (an object graph that may hold symbolic objects) as a
// standalone protocol-3 pickle. Tensors and storages inside are refused:
// their data lives outside the pickle.
Result<std::string> RepickleObject(const py::Object& o, const std::string& where);

}  // namespace ckfmt::convert
