#include "pickle_writer.h"

#include <cstring>

namespace ckfmt::convert {

PickleWriter::PickleWriter(int protocol) : protocol_(protocol) {
  Op(0x80);
  Op(static_cast<uint8_t>(protocol));
}

void PickleWriter::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PickleWriter::None() { Op('N'); }
void PickleWriter::Bool(bool v) { Op(v ? 0x88 : 0x89); }

void PickleWriter::Int(int64_t v) {
  if (v >= 0 && v < 256) {
    Op('K');
    Op(static_cast<uint8_t>(v));
  } else if (v >= 0 && v < 65536) {
    Op('M');
    Op(static_cast<uint8_t>(v & 0xff));
    Op(static_cast<uint8_t>(v >> 8));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    Op('J');
    U32(static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    // LONG1 with the minimal two's complement little-endian bytes.
    std::string b;
    uint64_t u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    while (b.size() > 1) {
      uint8_t last = b.back(), prev = b[b.size() - 2];
      if ((last == 0 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80))) {
        b.pop_back();
      } else {
        break;
      }
    }
    BigInt(b);
  }
}

void PickleWriter::BigInt(const std::string& b) {
  if (b.size() < 256) {
    Op(0x8a);
    Op(static_cast<uint8_t>(b.size()));
  } else {
    Op(0x8b);
    U32(static_cast<uint32_t>(b.size()));
  }
  out_ += b;
}

void PickleWriter::Float(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  Op('G');
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void PickleWriter::Str(const std::string& s) {
  Op('X');
  U32(static_cast<uint32_t>(s.size()));
  out_ += s;
}

void PickleWriter::Bytes(const std::string& b) {
  if (protocol_ >= 3) {
    Op('B');
    U32(static_cast<uint32_t>(b.size()));
    out_ += b;
    return;
  }
  // Protocol 2 has no bytes type: Python 3 pickles bytes as
  // _codecs.encode(<str of the same code points>, "latin1").
  std::string latin;
  for (unsigned char c : b) {
    if (c < 0x80) {
      latin += static_cast<char>(c);
    } else {
      latin += static_cast<char>(0xc0 | (c >> 6));
      latin += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  Global("_codecs", "encode");
  Str(latin);
  Str("latin1");
  Op(0x86);  // TUPLE2
  Reduce();
}

void PickleWriter::Global(const std::string& module, const std::string& name) {
  Op('c');
  out_ += module + "\n" + name + "\n";
}
void PickleWriter::Mark() { Op('('); }
void PickleWriter::Tuple() { Op('t'); }
void PickleWriter::EmptyTuple() { Op(')'); }
void PickleWriter::EmptyDict() { Op('}'); }
void PickleWriter::EmptyList() { Op(']'); }
void PickleWriter::SetItems() { Op('u'); }
void PickleWriter::Appends() { Op('e'); }
void PickleWriter::Reduce() { Op('R'); }
void PickleWriter::NewObj() { Op(0x81); }
void PickleWriter::Build() { Op('b'); }
void PickleWriter::BinPersId() { Op('Q'); }
void PickleWriter::Stop() { Op('.'); }

namespace {

Status Emit(PickleWriter& w, const py::Object& o, const std::string& where, int depth) {
  using py::Kind;
  if (depth > 200) return Status::Unsupported(where + ": object nested too deeply (or cyclic)");
  auto rec = [&](const py::Ref& r) { return Emit(w, *r, where, depth + 1); };
  switch (o.kind) {
    case Kind::kNone: w.None(); return Status::OK();
    case Kind::kBool: w.Bool(o.b); return Status::OK();
    case Kind::kInt: w.Int(o.i); return Status::OK();
    case Kind::kBigInt: w.BigInt(o.s); return Status::OK();
    case Kind::kFloat: w.Float(o.f); return Status::OK();
    case Kind::kStr: w.Str(o.s); return Status::OK();
    case Kind::kBytes: w.Bytes(o.s); return Status::OK();
    case Kind::kGlobal: w.Global(o.s, o.s2); return Status::OK();
    case Kind::kTuple:
      w.Mark();
      for (const auto& it : o.items) CKFMT_RETURN_IF_ERROR(rec(it));
      w.Tuple();
      return Status::OK();
    case Kind::kList:
    case Kind::kSet:
      if (o.kind == Kind::kSet) {  // builtins.set([...])
        w.Global("builtins", "set");
        w.Mark();
      }
      w.EmptyList();
      if (!o.items.empty()) {
        w.Mark();
        for (const auto& it : o.items) CKFMT_RETURN_IF_ERROR(rec(it));
        w.Appends();
      }
      if (o.kind == Kind::kSet) {
        w.Tuple();
        w.Reduce();
      }
      return Status::OK();
    case Kind::kDict:
      w.EmptyDict();
      if (!o.dict.empty()) {
        w.Mark();
        for (const auto& [k, v] : o.dict) {
          CKFMT_RETURN_IF_ERROR(rec(k));
          CKFMT_RETURN_IF_ERROR(rec(v));
        }
        w.SetItems();
      }
      return Status::OK();
    case Kind::kCall:
    case Kind::kInstance:
      if (o.kind == Kind::kInstance) {
        w.Global(o.s, o.s2);
        w.EmptyTuple();
        w.NewObj();
      } else {
        CKFMT_RETURN_IF_ERROR(rec(o.callable));
        CKFMT_RETURN_IF_ERROR(rec(o.args));
        if (o.s == "newobj") w.NewObj(); else w.Reduce();
      }
      if (!o.items.empty()) {
        w.Mark();
        for (const auto& it : o.items) CKFMT_RETURN_IF_ERROR(rec(it));
        w.Appends();
      }
      if (!o.dict.empty()) {
        w.Mark();
        for (const auto& [k, v] : o.dict) {
          CKFMT_RETURN_IF_ERROR(rec(k));
          CKFMT_RETURN_IF_ERROR(rec(v));
        }
        w.SetItems();
      }
      if (o.state) {
        CKFMT_RETURN_IF_ERROR(rec(o.state));
        w.Build();
      }
      return Status::OK();
    case Kind::kStorage:
    case Kind::kTensor:
      return Status::Unsupported(where + ": an opaque object holds a tensor; it cannot be carried "
                                 "as opaque pickle bytes (its data lives outside the pickle)");
  }
  return Status::Internal("unhandled kind");
}

}  // namespace

Result<std::string> RepickleObject(const py::Object& o, const std::string& where) {
  PickleWriter w(3);
  CKFMT_RETURN_IF_ERROR(Emit(w, o, where, 0));
  w.Stop();
  return w.Take();
}

}  // namespace ckfmt::convert
