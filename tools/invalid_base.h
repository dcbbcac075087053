// What the invalid vectors are made from: a small valid checkpoint kept
// as an index model plus its data region, and the byte-level edits that
// break it (invalid_vectors.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ckfmt/codec.h"
#include "ckfmt/index.h"
#include "raw_index.h"

namespace ckfmt::tools {

// A valid file before assembly: its index and the bytes of its data region,
// which starts at file offset 4096. Each chunk lies in blocks of its own.
struct InvalidBase {
  IndexRecord index;
  std::string data;

  uint64_t IndexOffset() const;  // where Assemble() puts the index
};

// The base checkpoint (spec/vectors/invalid/base.ckfmt): every entry kind,
// a 2-d tensor in one box, a zstd and a byte-plane chunk, a bytes blob,
// a list of dicts, and a tensor in two flat pieces from two ranks with a
// box saved_layout.
const InvalidBase& TheInvalidBase();

// The values of the base's float32 tensor z (i % 16), `count` of them.
std::string ZValues(size_t count);

// `raw` encoded with `codec` at level 3, as the base's chunks are.
std::string Encode(Codec codec, size_t element_size, const std::string& raw);

// header + data + index + zero padding + footer, as a writer lays them out
// (FORMAT.md §2): the index right after the data, the footer in the last 64
// bytes of the last block.
std::string Assemble(const std::string& data, const std::string& index);

// Recomputes the footer's index checksum (when the footer's index range
// lies inside the file) and the footer checksum, after an edit.
void Reseal(std::string* file);

// The top-level entry named `key`. REQUIRES: it exists.
EntryRecord& TopEntry(IndexRecord& index, std::string_view key);
const EntryRecord& TopEntry(const IndexRecord& index, std::string_view key);
RawEntry& TopEntry(RawIndex& index, std::string_view key);

// `frame`, a zstd frame, with its header rewritten: single-segment or a
// window of 2^window_log, and `dict_id` (0: none). Content size and blocks
// are kept.
std::string RewriteZstdHeader(const std::string& frame, bool single_segment, int window_log,
                              uint32_t dict_id);

}  // namespace ckfmt::tools
