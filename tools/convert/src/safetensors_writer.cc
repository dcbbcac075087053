// safetensors output: tensors only, dotted keys, __metadata__ from the
// checkpoint's metadata.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>

#include "file_io.h"
#include "place_tensor.h"
#include "safetensors_reader.h"
#include "sink.h"

namespace ckfmt::convert {
namespace {

struct Leaf {
  std::string key;
  TensorSource* t;
};

const char* NodeKindName(Node::Kind k) {
  switch (k) {
    case Node::Kind::kNone: return "None";
    case Node::Kind::kBool: return "bool";
    case Node::Kind::kInt: return "int";
    case Node::Kind::kFloat: return "float";
    case Node::Kind::kStr: return "string";
    case Node::Kind::kBytes: return "bytes";
    case Node::Kind::kTensor: return "tensor";
    case Node::Kind::kDict: return "empty dict";
    case Node::Kind::kList: return "empty list";
  }
  return "?";
}

void Collect(const Node& n, KeyPath& path, std::vector<Leaf>& leaves, ConvertLog* log) {
  if (n.kind == Node::Kind::kTensor) {
    leaves.push_back({DottedKeyPath(path), n.tensor.get()});
    return;
  }
  if (n.kind == Node::Kind::kDict || n.kind == Node::Kind::kList) {
    if (n.children.empty() && !path.empty()) {
      log->dropped.emplace_back(DottedKeyPath(path), std::string("safetensors holds tensors only (") +
                                                         NodeKindName(n.kind) + ")");
    }
    for (size_t i = 0; i < n.children.size(); ++i) {
      if (n.kind == Node::Kind::kList) path.emplace_back(static_cast<uint64_t>(i));
      else path.emplace_back(n.children[i].first);
      Collect(n.children[i].second, path, leaves, log);
      path.pop_back();
    }
    return;
  }
  log->dropped.emplace_back(DottedKeyPath(path), std::string("safetensors holds tensors only (") +
                                                     NodeKindName(n.kind) + ")");
}

}  // namespace

Result<SinkStats> WriteSafetensors(const Node& root, const std::string& path,
                                   const SinkOptions& options, ConvertLog* log) {
  std::vector<Leaf> leaves;
  KeyPath kp;
  Collect(root, kp, leaves, log);
  // The header is written member by member, in the tensors' order:
  // nlohmann's ordered_json inserts in linear time (a 90000-tensor header
  // took 20 s), and its plain json would sort the keys.
  std::string h = "{";
  auto member = [&h](const std::string& key, const nlohmann::json& value) {
    if (h.size() > 1) h += ',';
    h += nlohmann::json(key).dump() + ':' + value.dump();
  };
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [k, v] : options.metadata) {
    if (k.rfind("convert.", 0) == 0) continue;
    meta[k] = v;
  }
  if (!meta.empty()) member("__metadata__", meta);
  std::map<std::string, bool> seen;
  uint64_t off = 0;
  std::vector<uint64_t> offsets;
  for (const auto& l : leaves) {
    if (l.key == "__metadata__" || !seen.emplace(l.key, true).second) {
      return Status::InvalidArgument(path + ": two tensors map to the safetensors key \"" + l.key +
                                     "\"");
    }
    std::string dt = SafetensorsDTypeName(l.t->dtype);
    if (dt.empty()) {
      log->dropped.emplace_back(l.key, "dtype " + std::string(DTypeName(l.t->dtype)) +
                                           " has no safetensors equivalent");
      offsets.push_back(UINT64_MAX);
      continue;
    }
    if (l.t->partial) {
      log->dropped.emplace_back(l.key, "partial tensor (not every element was saved); "
                                       "safetensors needs whole tensors");
      offsets.push_back(UINT64_MAX);
      continue;
    }
    uint64_t n = l.t->nbytes();
    nlohmann::json entry = nlohmann::json::object();
    entry["dtype"] = dt;
    entry["shape"] = l.t->shape;
    entry["data_offsets"] = {off, off + n};
    member(l.key, entry);
    offsets.push_back(off);
    off += n;
  }
  h += '}';
  while ((8 + h.size()) % 8) h += ' ';
  CKFMT_ASSIGN_OR_RETURN(auto out, OutputFile::Create(path));
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  CKFMT_RETURN_IF_ERROR(out->WriteAt(0, prefix.data(), 8));
  CKFMT_RETURN_IF_ERROR(out->WriteAt(8, h.data(), h.size()));
  uint64_t data_start = 8 + h.size();
  SinkStats stats;
  PieceMemory memory(options.budget);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (offsets[i] == UINT64_MAX) continue;
    CKFMT_RETURN_IF_ERROR(PlaceTensor(out.get(), data_start + offsets[i], *leaves[i].t,
                                      memory, nullptr, [&](uint64_t nb) {
                                        stats.data_bytes += nb;
                                        if (options.progress) {
                                          options.progress(stats.data_bytes, options.total_bytes,
                                                           leaves[i].key);
                                        }
                                      }));
    ++stats.tensors;
  }
  CKFMT_RETURN_IF_ERROR(out->Commit(options.fsync));
  stats.output_bytes = data_start + off;
  return stats;
}

}  // namespace ckfmt::convert
