#include "invalid_base.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ckfmt/checksum.h"
#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"

namespace ckfmt::tools {
namespace {

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

}  // namespace

std::string ZValues(size_t count) {
  std::vector<float> z(count);
  for (size_t i = 0; i < count; ++i) z[i] = static_cast<float>(i % 16);
  return Bytes(z);
}

std::string Encode(Codec codec, size_t element_size, const std::string& raw) {
  std::string out(MaxEncodedSize(codec, raw.size()), '\0');
  auto n = EncodeChunk(codec, 3, element_size, raw.data(), raw.size(), out.data(), out.size());
  if (!n.ok()) {
    std::fprintf(stderr, "invalid vectors: %s\n", n.status().ToString().c_str());
    std::abort();
  }
  out.resize(*n);
  return out;
}

namespace {

// Appends `stored` in blocks of its own; returns its chunk.
ChunkRecord AddChunk(InvalidBase* base, Codec codec, const std::string& stored, uint64_t raw_size) {
  ChunkRecord c;
  c.offset = kHeaderSize + base->data.size();
  c.stored_size = stored.size();
  c.raw_size = raw_size;
  c.checksum = Checksum(stored.data(), stored.size());
  c.codec = static_cast<uint8_t>(codec);
  base->data += stored;
  base->data.resize(AlignUp(base->data.size()), '\0');
  return c;
}

EntryRecord Scalar(KeyPath path, EntryKind kind) {
  EntryRecord e;
  e.path = std::move(path);
  e.kind = kind;
  return e;
}

// A data entry stored as one whole piece of one chunk.
EntryRecord WholeEntry(InvalidBase* base, std::string key, DType dtype, Shape shape, Codec codec,
                       const std::string& raw) {
  EntryRecord e = Scalar({std::move(key)}, EntryKind::kTensor);
  e.dtype = dtype;
  e.shape = shape;
  const std::string stored = codec == Codec::kNone ? raw : Encode(codec, DTypeSize(dtype), raw);
  e.pieces.push_back({0, Region::Whole(shape), {AddChunk(base, codec, stored, raw.size())}});
  return e;
}

InvalidBase MakeBase() {
  InvalidBase b;
  IndexRecord& ix = b.index;
  ix.writer_name = "ckfmt-make-vectors";
  ix.writer_version = "invalid-base 1";
  ix.world_size = 2;
  ix.save_mode = "parallel";
  ix.metadata = {{"step", "7"}};

  EntryRecord step = Scalar({"step"}, EntryKind::kInt);
  step.int_value = 7;
  EntryRecord lr = Scalar({"lr"}, EntryKind::kFloat);
  lr.float_value = 0.001;
  EntryRecord name = Scalar({"name"}, EntryKind::kString);
  name.string_value = "base";
  ix.entries = {step, lr, name};

  std::vector<float> w(16);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i);
  std::vector<uint16_t> bp(1024);
  for (size_t i = 0; i < bp.size(); ++i) {
    bp[i] =
        static_cast<uint16_t>(std::bit_cast<uint32_t>(0.25f * static_cast<float>(i % 32)) >> 16);
  }
  ix.entries.push_back(WholeEntry(&b, "w", DType::kF32, {4, 4}, Codec::kNone, Bytes(w)));
  ix.entries.push_back(WholeEntry(&b, "z", DType::kF32, {1024}, Codec::kZstd, ZValues(1024)));
  ix.entries.push_back(
      WholeEntry(&b, "bp", DType::kBF16, {1024}, Codec::kBytePlaneZstd, Bytes(bp)));

  const std::string json = "{\"epoch\": 3}";
  EntryRecord blob = WholeEntry(&b, "blob", DType::kU8, {json.size()}, Codec::kNone, json);
  blob.kind = EntryKind::kBytes;
  blob.content_type = "json";
  ix.entries.push_back(blob);

  ix.entries.push_back(Scalar({"opt"}, EntryKind::kList));
  ix.entries.push_back(Scalar({"opt", uint64_t{0}}, EntryKind::kDict));
  EntryRecord flag = Scalar({"opt", uint64_t{0}, "flag"}, EntryKind::kBool);
  flag.bool_value = true;
  ix.entries.push_back(flag);
  ix.entries.push_back(Scalar({"opt", uint64_t{0}, "none"}, EntryKind::kNone));

  // int32 [4, 2] = 0..7, FSDP style: rank r holds flat elements [4r, 4r + 4),
  // saved from a layout of two row blocks.
  EntryRecord sharded = Scalar({"sharded"}, EntryKind::kTensor);
  sharded.dtype = DType::kI32;
  sharded.shape = {4, 2};
  for (uint32_t rank = 0; rank < 2; ++rank) {
    std::vector<int32_t> half(4);
    for (int32_t i = 0; i < 4; ++i) half[i] = static_cast<int32_t>(4 * rank) + i;
    sharded.pieces.push_back(
        {rank, Region::Flat(4 * rank, 4), {AddChunk(&b, Codec::kNone, Bytes(half), 16)}});
    sharded.saved_layout.push_back({rank, Region::Box({2ull * rank, 0}, {2, 2})});
  }
  ix.entries.push_back(sharded);
  return b;
}

}  // namespace

uint64_t InvalidBase::IndexOffset() const { return kHeaderSize + data.size(); }

const InvalidBase& TheInvalidBase() {
  static const InvalidBase base = MakeBase();
  return base;
}

std::string Assemble(const std::string& data, const std::string& index) {
  std::string file(kHeaderSize, '\0');
  FileHeader header;
  EncodeHeader(header, reinterpret_cast<uint8_t*>(file.data()));
  file += data;
  file.resize(AlignUp(file.size()), '\0');
  FileFooter footer;
  footer.index_offset = file.size();
  footer.index_length = index.size();
  footer.index_checksum = Checksum(index.data(), index.size());
  file += index;
  file.resize(AlignUp(file.size() + kFooterSize) - kFooterSize, '\0');
  uint8_t tail[kFooterSize];
  EncodeFooter(footer, tail);
  file.append(reinterpret_cast<const char*>(tail), kFooterSize);
  return file;
}

void Reseal(std::string* file) {
  auto* f = reinterpret_cast<uint8_t*>(file->data());
  uint8_t* footer = f + file->size() - kFooterSize;
  const uint64_t offset = GetU64(footer), length = GetU64(footer + 8);
  if (offset <= file->size() && length <= file->size() - offset) {
    PutU64(footer + 16, Checksum(f + offset, length));
  }
  PutU64(footer + 48, Checksum(footer, 48));
}

EntryRecord& TopEntry(IndexRecord& index, std::string_view key) {
  for (EntryRecord& e : index.entries) {
    if (e.path.size() == 1 && e.path[0] == PathComponent(std::string(key))) return e;
  }
  std::fprintf(stderr, "invalid vectors: no entry %.*s\n", static_cast<int>(key.size()),
               key.data());
  std::abort();
}

const EntryRecord& TopEntry(const IndexRecord& index, std::string_view key) {
  return TopEntry(const_cast<IndexRecord&>(index), key);
}

RawEntry& TopEntry(RawIndex& index, std::string_view key) {
  for (RawEntry& e : index.entries) {
    if (e.path.size() == 1 && e.path[0].key == std::string(key)) return e;
  }
  std::fprintf(stderr, "invalid vectors: no entry %.*s\n", static_cast<int>(key.size()),
               key.data());
  std::abort();
}

std::string RewriteZstdHeader(const std::string& frame, bool single_segment, int window_log,
                              uint32_t dict_id) {
  // RFC 8878 §3.1.1.1: magic, descriptor, [window], [dictionary id], [content size].
  const auto* p = reinterpret_cast<const uint8_t*>(frame.data());
  const uint8_t descriptor = p[4];
  const int size_flag = descriptor >> 6;
  const bool single = (descriptor >> 5) & 1;
  const bool checksum = (descriptor >> 2) & 1;
  static constexpr int kDictBytes[] = {0, 1, 2, 4};
  static constexpr int kSizeBytes[] = {0, 2, 4, 8};
  size_t pos = 5 + (single ? 0 : 1) + kDictBytes[descriptor & 3];
  const int size_bytes = size_flag == 0 ? (single ? 1 : 0) : kSizeBytes[size_flag];
  uint64_t content_size = 0;
  for (int i = 0; i < size_bytes; ++i) content_size |= uint64_t{p[pos + i]} << (8 * i);
  if (size_bytes == 2) content_size += 256;
  pos += size_bytes;

  std::string out = frame.substr(0, 4);
  // The content size as 4 bytes (flag 2); a 4-byte dictionary id when asked.
  out += static_cast<char>((2 << 6) | (single_segment ? 1 << 5 : 0) | (checksum ? 1 << 2 : 0) |
                           (dict_id != 0 ? 3 : 0));
  if (!single_segment) out += static_cast<char>((window_log - 10) << 3);
  char word[4];
  if (dict_id != 0) {
    PutU32(reinterpret_cast<uint8_t*>(word), dict_id);
    out.append(word, 4);
  }
  PutU32(reinterpret_cast<uint8_t*>(word), static_cast<uint32_t>(content_size));
  out.append(word, 4);
  return out + frame.substr(pos);
}

}  // namespace ckfmt::tools
