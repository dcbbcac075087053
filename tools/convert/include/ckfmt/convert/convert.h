// `ckfmt convert`: PyTorch checkpoint formats to and from ckfmt.
//
// Inputs, recognised by content: ckfmt files; torch.save archives (the zip
// container, any record prefix, ZIP64) and pre-1.6 torch.save files; PyTorch
// DCP directories (.metadata + __R_N.distcp); safetensors files and sharded
// safetensors repos (model.safetensors.index.json, or its directory).
// Outputs: ckfmt, safetensors (tensors only), torch.save zip loadable with
// torch.load(weights_only=True), and DCP directories that
// torch.distributed.checkpoint loads (one data file, whole tensors).
//
// Pickle is never executed: a restricted unpickler interprets the opcodes
// and accepts only the globals torch checkpoints use. Tensor data is
// streamed in pieces bounded by ConvertOptions::memory_budget.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckfmt/status.h"

namespace ckfmt::convert {

enum class Format {
  kAuto,           // as destination: from the extension; as source: from content
  kCkfmt,
  kSafetensors,    // a single .safetensors file
  kSafetensorsSharded,  // model.safetensors.index.json (+ shards); source only
  kTorchZip,       // torch.save since 1.6
  kTorchLegacy,    // torch.save before 1.6 (_use_new_zipfile_serialization=False); source only
  kDcp,            // torch.distributed.checkpoint directory
};
const char* FormatName(Format f);
// "ckfmt", "safetensors", "torch"/"pt", "dcp" ... for the CLI's --to.
Result<Format> ParseFormat(const std::string& name);

// (bytes done, bytes total, key being converted).
using ProgressFn = std::function<void(uint64_t, uint64_t, const std::string&)>;

struct ConvertOptions {
  std::string src;
  std::string dst;
  Format to = Format::kAuto;        // kAuto: from dst's extension
  Format from = Format::kAuto;      // kAuto: detected from src's content
  // Carry pickled objects that use globals outside the whitelist as opaque
  // Bytes entries (content_type "pickle", re-serialized without executing)
  // instead of refusing the file.
  bool allow_opaque_pickle = false;
  // DCP: record each chunk's original place as the entry's saved_layout.
  bool keep_sharding_metadata = true;
  // safetensors/DCP sources: split dotted keys into nested dicts
  // ("a.b.c" -> a/b/c). DCP uses the saved planner paths when present.
  bool split_dotted_keys = true;
  // Bytes of tensor data held in memory at once by the converter (read
  // buffers); the ckfmt writer's staging comes on top (io_staging_bytes).
  uint64_t memory_budget = 256ull << 20;
  uint64_t io_staging_bytes = 64ull << 20;
  bool verify_zip_crc = true;  // check CRC-32 of zip records read whole
  bool fsync = true;
  ProgressFn progress;
};

struct DroppedEntry {
  std::string key;     // dotted key path
  std::string reason;
};

struct ConvertReport {
  std::string src, dst;
  Format from = Format::kAuto, to = Format::kAuto;
  uint64_t tensors = 0;        // tensor entries written
  uint64_t scalars = 0;        // int/float/bool/string/none entries written
  uint64_t containers = 0;     // dicts and lists written
  uint64_t blobs = 0;          // bytes entries written
  uint64_t tensor_bytes = 0;   // logical tensor/blob bytes written
  uint64_t output_bytes = 0;   // size of the output file
  double seconds = 0;
  std::vector<DroppedEntry> dropped;       // not representable in the output
  std::vector<std::string> notes;          // lossy but kept (e.g. int keys stringified)
};

// Converts options.src into options.dst. The destination appears only when
// complete (written to a temporary name, then renamed).
Result<ConvertReport> Run(const ConvertOptions& options);

// Multi-line human-readable summary; the keys and notes in it, which come
// from the source, with their control characters escaped.
std::string FormatReport(const ConvertReport& report);

// Detects a source's format from its content (and the directory layout).
Result<Format> DetectFormat(const std::string& path);

}  // namespace ckfmt::convert
