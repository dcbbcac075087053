// torch.save files: the zip container (since torch 1.6) and the legacy
// sequence-of-pickles format, read into the converter's tree without
// executing any pickle.
#pragma once

#include <memory>
#include <string>

#include "ckfmt/status.h"
#include "file_io.h"
#include "tree.h"
#include "zip_reader.h"

namespace ckfmt::convert {

struct TorchReadOptions {
  bool allow_opaque = false;
  bool verify_crc = true;
};

// The object saved in a torch.save zip archive (the root may be any value,
// e.g. a tensor for a DCP item). Tensors keep the archive open.
Result<Node> ReadTorchZip(std::shared_ptr<ZipArchive> zip, const TorchReadOptions& options,
                          ConvertLog* log);

// The legacy (pre-1.6) format: magic number, protocol version, system info,
// the object, the storage keys, then each storage as an 8-byte element
// count and its raw bytes.
Result<Node> ReadTorchLegacy(std::shared_ptr<InputFile> file, const TorchReadOptions& options,
                             ConvertLog* log);

// True if the bytes start like a legacy torch.save file (a pickle of the
// magic number).
bool LooksLikeTorchLegacy(const uint8_t* p, size_t n);

}  // namespace ckfmt::convert
