// torch.save output: a zip archive loadable by torch.load(weights_only=True).
// data.pkl is protocol 2 and uses only globals that loader allows:
// torch._utils._rebuild_tensor_v2 with torch.<T>Storage, or (dtypes
// without a legacy storage class) _rebuild_tensor_v3 with
// torch.storage.UntypedStorage and the dtype; collections.OrderedDict for
// the hooks argument; _codecs.encode for bytes.
#include <vector>

#include <nlohmann/json.hpp>

#include "crc32.h"
#include "file_io.h"
#include "pickle_globals.h"
#include "pickle_writer.h"
#include "place_tensor.h"
#include "sink.h"
#include "torch_zip_writer.h"
#include "zip_writer.h"

namespace ckfmt::convert {
namespace {

constexpr const char* kPrefix = "archive/";

bool Dropped(const Node& n) { return n.kind == Node::Kind::kBytes && n.content_type == "pickle"; }

struct Pickler {
  PickleWriter w{2};
  std::vector<std::pair<std::string, TensorSource*>> storages;  // (dotted key, tensor)
  ConvertLog* log;

  void IntTuple(const std::vector<uint64_t>& v) {
    w.Mark();
    for (uint64_t x : v) w.Int(static_cast<int64_t>(x));
    w.Tuple();
  }

  // A dict's attributes as tree.cc's PlainJson recorded them: objects
  // become dicts (a state dict's _metadata is an OrderedDict in torch;
  // load_state_dict reads either alike), arrays lists.
  void Plain(const nlohmann::ordered_json& v) {
    if (v.is_object()) {
      w.EmptyDict();
      if (v.empty()) return;
      w.Mark();
      for (const auto& [k, x] : v.items()) {
        w.Str(k);
        Plain(x);
      }
      w.SetItems();
    } else if (v.is_array()) {
      w.EmptyList();
      if (v.empty()) return;
      w.Mark();
      for (const auto& x : v) Plain(x);
      w.Appends();
    } else if (v.is_string()) {
      w.Str(v.get<std::string>());
    } else if (v.is_boolean()) {
      w.Bool(v.get<bool>());
    } else if (v.is_number_integer()) {
      w.Int(v.get<int64_t>());
    } else if (v.is_number()) {
      w.Float(v.get<double>());
    } else {
      w.None();
    }
  }

  void Tensor(TensorSource& t, const std::string& key) {
    std::string sk = std::to_string(storages.size());
    storages.emplace_back(key, &t);
    uint64_t numel = 1;
    for (uint64_t d : t.shape) numel *= d;
    std::vector<uint64_t> stride(t.shape.size(), 1);
    for (size_t d = t.shape.size(); d-- > 1;) stride[d - 1] = stride[d] * t.shape[d];
    std::string cls = StorageClassOf(t.dtype);
    w.Global("torch._utils", cls.empty() ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
    w.Mark();
    w.Mark();  // persistent id ('storage', type, key, location, numel)
    w.Str("storage");
    if (cls.empty()) {
      w.Global("torch.storage", "UntypedStorage");
    } else {
      w.Global("torch", cls);
    }
    w.Str(sk);
    w.Str("cpu");
    w.Int(static_cast<int64_t>(cls.empty() ? numel * DTypeSize(t.dtype) : numel));
    w.Tuple();
    w.BinPersId();
    w.Int(0);
    IntTuple(t.shape);
    IntTuple(stride);
    w.Bool(false);
    w.Global("collections", "OrderedDict");
    w.EmptyTuple();
    w.Reduce();
    if (cls.empty()) w.Global("torch", std::string(DTypeName(t.dtype)));
    w.Tuple();
    w.Reduce();
  }

  Status Visit(const Node& n, const std::string& key) {
    switch (n.kind) {
      case Node::Kind::kNone: w.None(); return Status::OK();
      case Node::Kind::kBool: w.Bool(n.b); return Status::OK();
      case Node::Kind::kInt: w.Int(n.i); return Status::OK();
      case Node::Kind::kFloat: w.Float(n.f); return Status::OK();
      case Node::Kind::kStr: w.Str(n.s); return Status::OK();
      case Node::Kind::kBytes:
        if (Dropped(n)) {  // only inside lists: dicts skip the key
          w.None();
          log->dropped.emplace_back(key, "opaque pickle bytes cannot be loaded with "
                                         "torch.load(weights_only=True); None kept in the list");
          return Status::OK();
        }
        if (n.partial) return PartialBytesRefused(key);
        if (n.content_type != "bytes") {
          log->Note(key + ": bytes with content_type \"" + n.content_type +
                    "\" written as Python bytes");
        }
        w.Bytes(n.s);
        return Status::OK();
      case Node::Kind::kTensor:
        if (n.tensor->partial) {
          return Status::Unsupported(key + ": tensor is partial (not every element was saved); "
                                     "torch.save needs whole tensors");
        }
        Tensor(*n.tensor, key);
        return Status::OK();
      case Node::Kind::kDict: {
        if (n.ordered) {
          w.Global("collections", "OrderedDict");
          w.EmptyTuple();
          w.Reduce();
        } else {
          w.EmptyDict();
        }
        size_t in_batch = 0;
        for (const auto& [k, v] : n.children) {
          std::string ck = JoinKey(key, k);
          if (Dropped(v)) {
            log->dropped.emplace_back(ck, "opaque pickle bytes cannot be loaded with "
                                          "torch.load(weights_only=True)");
            continue;
          }
          if (in_batch == 0) w.Mark();
          bool int_key = false;
          int64_t iv = 0;
          if (n.int_keys) {
            try {
              size_t used = 0;
              iv = std::stoll(k, &used);
              int_key = used == k.size();
            } catch (...) {
            }
          }
          if (int_key) w.Int(iv); else w.Str(k);
          CKFMT_RETURN_IF_ERROR(Visit(v, ck));
          if (++in_batch == 1000) {
            w.SetItems();
            in_batch = 0;
          }
        }
        if (in_batch) w.SetItems();
        if (!n.attributes.empty()) {
          auto attributes = nlohmann::ordered_json::parse(n.attributes, nullptr, false);
          if (attributes.is_object()) {
            Plain(attributes);
            w.Build();
          }
        }
        return Status::OK();
      }
      case Node::Kind::kList: {
        if (n.is_tuple) w.Mark(); else w.EmptyList();
        if (!n.is_tuple && !n.children.empty()) w.Mark();
        for (size_t i = 0; i < n.children.size(); ++i) {
          CKFMT_RETURN_IF_ERROR(Visit(n.children[i].second, JoinKey(key, std::to_string(i))));
        }
        if (n.is_tuple) w.Tuple();
        else if (!n.children.empty()) w.Appends();
        return Status::OK();
      }
    }
    return Status::Internal("unhandled node");
  }
};

}  // namespace

Result<uint64_t> WriteTorchArchive(const Node& value, const std::string& key, OutputFile* out,
                                   uint64_t base, PieceMemory& memory, const SinkOptions& options,
                                   ConvertLog* log, SinkStats* stats) {
  Pickler p;
  p.log = log;
  CKFMT_RETURN_IF_ERROR(p.Visit(value, key));
  p.w.Stop();
  ZipWriter zip(out, base);
  std::string prefix = kPrefix;
  CKFMT_RETURN_IF_ERROR(zip.AddRecord(prefix + "data.pkl", p.w.data()));
  CKFMT_RETURN_IF_ERROR(zip.AddRecord(prefix + "byteorder", "little"));
  for (size_t i = 0; i < p.storages.size(); ++i) {
    // Not a structured binding: lambdas capture those only since Clang 16.
    const std::string& tensor_key = p.storages[i].first;
    const auto& t = p.storages[i].second;
    CKFMT_ASSIGN_OR_RETURN(uint64_t off,
                           zip.BeginRecord(prefix + "data/" + std::to_string(i), t->nbytes()));
    uint32_t crc = 0;
    CKFMT_RETURN_IF_ERROR(PlaceTensor(out, off, *t, memory, &crc, [&](uint64_t nb) {
      stats->data_bytes += nb;
      if (options.progress) options.progress(stats->data_bytes, options.total_bytes, tensor_key);
    }));
    CKFMT_RETURN_IF_ERROR(zip.EndRecord(crc));
    ++stats->tensors;
  }
  CKFMT_RETURN_IF_ERROR(zip.AddRecord(prefix + "version", "3\n"));
  return zip.Finish();
}

Result<SinkStats> WriteTorchZip(const Node& root, const std::string& path,
                                const SinkOptions& options, ConvertLog* log) {
  SinkStats stats;
  CKFMT_ASSIGN_OR_RETURN(auto out, OutputFile::Create(path));
  PieceMemory memory(options.budget);
  CKFMT_ASSIGN_OR_RETURN(stats.output_bytes,
                         WriteTorchArchive(root, "", out.get(), 0, memory, options, log, &stats));
  CKFMT_RETURN_IF_ERROR(out->Commit(options.fsync));
  return stats;
}

}  // namespace ckfmt::convert
