// Save(): a state dict -> CheckpointWriter calls, in pre-order.
#include "save_entries.h"

namespace ckfmt {
namespace {

Status AddValue(CheckpointWriter& w, const std::string& file, const KeyPath& path, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kDict:
      return w.AddContainer(path, EntryKind::kDict);
    case Value::Kind::kList:
      return w.AddContainer(path, EntryKind::kList);
    case Value::Kind::kBytes:
      return w.AddBytes(path, v.as_bytes().content_type, v.as_bytes().data.data(),
                        v.as_bytes().data.size());
    case Value::Kind::kTensor: {
      const Tensor& t = v.as_tensor();
      if (t.numel() > 0 && !t.data()) {
        return Status::InvalidArgument(file + ": " + FormatKeyPath(path) + ": tensor has no data");
      }
      if (t.region().NumElements() != t.numel()) {
        return Status::InvalidArgument(file + ": " + FormatKeyPath(path) + ": shard region " +
                                       t.region().ToString() + " holds " +
                                       std::to_string(t.region().NumElements()) +
                                       " elements but the tensor has " + std::to_string(t.numel()));
      }
      CKFMT_RETURN_IF_ERROR(
          w.AddTensorPiece(path, t.dtype(), t.global_shape(), t.region(), 0, t.data(), t.device()));
      // A lone shard of a larger tensor cannot cover it.
      auto global = NumElements(t.global_shape());
      if (global.ok() && *global != t.numel()) return w.MarkPartial(path);
      return Status::OK();
    }
    default:
      return w.AddScalar(path, v);
  }
}

}  // namespace

Result<std::unique_ptr<CheckpointWriter>> BeginSave(const std::string& path,
                                                    const Value& state_dict,
                                                    const SaveOptions& options) {
  if (!state_dict.is_dict()) {
    return Status::InvalidArgument(path + ": the state dict to save must be a dict, got a " +
                                   ValueKindName(state_dict.kind()));
  }
  CKFMT_ASSIGN_OR_RETURN(auto writer, CheckpointWriter::Create(path, options));
  writer->DeferReads();  // the caller keeps the state until Flush() or Commit()
  uint64_t bytes = 0;
  VisitValues(state_dict, [&](const KeyPath&, const Value& v) {
    if (v.kind() == Value::Kind::kTensor) bytes += v.as_tensor().nbytes();
    if (v.kind() == Value::Kind::kBytes) bytes += v.as_bytes().data.size();
  });
  writer->ExpectBytes(bytes);
  return writer;
}

Status AddEntries(CheckpointWriter& writer, const std::string& path, const Value& state_dict,
                  size_t begin, size_t end) {
  Status status;
  size_t visit = 0;
  VisitValues(state_dict, [&](const KeyPath& p, const Value& v) {
    const size_t i = visit++;
    if (status.ok() && i >= begin && i < end) status = AddValue(writer, path, p, v);
  });
  return status;
}

Result<WriteStats> Save(const std::string& path, const Value& state_dict,
                        const SaveOptions& options) {
  CKFMT_ASSIGN_OR_RETURN(auto writer, BeginSave(path, state_dict, options));
  CKFMT_RETURN_IF_ERROR(AddEntries(*writer, path, state_dict));
  CKFMT_RETURN_IF_ERROR(writer->Commit());
  return writer->stats();
}

}  // namespace ckfmt
