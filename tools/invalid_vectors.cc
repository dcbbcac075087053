#include "invalid_vectors.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>

#include "ckfmt/checksum.h"
#include "ckfmt/file_layout.h"
#include "describe_json.h"
#include "invalid_base.h"

namespace ckfmt::tools {
namespace {

struct Recipe {
  InvalidVector vector;
  std::function<std::string()> make;
};

const InvalidBase& Base() { return TheInvalidBase(); }

std::string BaseFile() { return Assemble(Base().data, SerializeIndex(Base().index)); }

// The base file with its bytes edited; `reseal` recomputes the checksums
// in the footer afterwards, so that only the rule meant is broken.
std::string EditBytes(const std::function<void(std::string&)>& edit, bool reseal) {
  std::string file = BaseFile();
  edit(file);
  if (reseal) Reseal(&file);
  return file;
}

uint8_t* At(std::string& file, uint64_t offset) {
  return reinterpret_cast<uint8_t*>(file.data()) + offset;
}
uint8_t* Footer(std::string& file) { return At(file, file.size() - kFooterSize); }
uint64_t IndexStart(std::string& file) { return GetU64(Footer(file)); }

// The base file with its index edited field by field.
std::string EditIndex(const std::function<void(RawIndex&)>& edit) {
  RawIndex raw = ToRaw(Base().index);
  edit(raw);
  return Assemble(Base().data, SerializeRawIndex(raw));
}

// The base file with the stored bytes of top-level entry `key`'s first
// chunk edited; the index follows (stored size, checksum), so only the
// codec's rules can break.
std::string EditChunk(const std::string& key, const std::function<void(std::string&)>& edit) {
  InvalidBase base = Base();
  ChunkRecord& c = TopEntry(base.index, key).pieces.at(0).chunks.at(0);
  const uint64_t at = c.offset - kHeaderSize, room = AlignUp(c.stored_size);
  std::string stored = base.data.substr(at, c.stored_size);
  edit(stored);
  if (stored.size() > room) {
    std::fprintf(stderr, "invalid vectors: edited chunk of %s outgrows its blocks\n", key.c_str());
    std::abort();
  }
  base.data.replace(at, room, stored + std::string(room - stored.size(), '\0'));
  c.stored_size = stored.size();
  c.checksum = Checksum(stored.data(), stored.size());
  return Assemble(base.data, SerializeIndex(base.index));
}

// A byte-plane chunk of 2-byte elements from two planes given as
// (mode, payload).
std::string TwoPlanes(uint8_t mode0, const std::string& plane0, uint8_t mode1,
                      const std::string& plane1) {
  std::string out = {2, 0};
  for (const auto& [mode, plane] : {std::pair{mode0, &plane0}, std::pair{mode1, &plane1}}) {
    char len[4];
    PutU32(reinterpret_cast<uint8_t*>(len), static_cast<uint32_t>(plane->size()));
    out += static_cast<char>(mode);
    out.append(len, 4);
  }
  return out + plane0 + plane1;
}

RawPiece& WPiece(RawIndex& r) { return TopEntry(r, "w").pieces->at(0); }
ChunkRecord& WChunk(RawIndex& r) { return WPiece(r).chunks->at(0); }
ChunkRecord& ZChunk(RawIndex& r) { return TopEntry(r, "z").pieces->at(0).chunks->at(0); }
std::vector<RawPiece>& ShardedPieces(RawIndex& r) { return *TopEntry(r, "sharded").pieces; }
// i = 0: opt, 1: opt[0], 2: opt[0].flag, 3: opt[0].none
RawEntry& OptEntry(RawIndex& r, size_t i) { return r.entries.at(7 + i); }

const PathComponent kZ = std::string("z"), kW = std::string("w"), kBp = std::string("bp");

InvalidVector Open(std::string name, std::string rule, std::string what,
                   StatusCode refusal = StatusCode::kCorruption) {
  return {std::move(name), std::move(rule), refusal, {}, std::move(what)};
}
InvalidVector Read(std::string name, std::string rule, PathComponent key, std::string what,
                   StatusCode refusal = StatusCode::kCorruption) {
  return {std::move(name), std::move(rule), refusal, {std::move(key)}, std::move(what)};
}

std::vector<Recipe> LayoutRecipes() {
  return {
      {Open("L1_size_not_multiple", "L1", "one byte appended: the size is not a multiple of 4096"),
       [] { return EditBytes([](std::string& f) { f += '\0'; }, false); }},
      {Open("L1_too_small", "L1", "only the 4096-byte header"),
       [] { return EditBytes([](std::string& f) { f.resize(kHeaderSize); }, false); }},
      {Open("H1_header_magic", "H1", "header magic byte 1 is 'X'"),
       [] { return EditBytes([](std::string& f) { f[1] = 'X'; }, false); }},
      {Open("H2_header_major", "H2", "header major version 2", StatusCode::kUnsupported),
       [] { return EditBytes([](std::string& f) { PutU16(At(f, 8), 2); }, false); }},
      {Open("H3_header_flags", "H3", "header flags 1"),
       [] { return EditBytes([](std::string& f) { PutU32(At(f, 12), 1); }, false); }},
      {Open("H4_header_reserved", "H4", "header byte 2048 is 1"),
       [] { return EditBytes([](std::string& f) { f[2048] = 1; }, false); }},
      {Open("F1_footer_magic", "F1", "footer magic byte 0 is 'X'"),
       [] { return EditBytes([](std::string& f) { f[f.size() - 8] = 'X'; }, false); }},
      {Open("F2_footer_checksum", "F2", "one bit of footer_checksum flipped"),
       [] { return EditBytes([](std::string& f) { *At(f, f.size() - 16) ^= 1; }, false); }},
      {Open("F3_footer_major", "F3",
            "footer major version 2 (the header says 1, so H5 fails too; F3 comes first)",
            StatusCode::kUnsupported),
       [] { return EditBytes([](std::string& f) { PutU16(Footer(f) + 24, 2); }, true); }},
      {Open("F4_footer_flags", "F4", "footer flags 1"),
       [] { return EditBytes([](std::string& f) { PutU32(Footer(f) + 28, 1); }, true); }},
      {Open("F4_footer_reserved", "F4", "footer byte 40 is 1"),
       [] { return EditBytes([](std::string& f) { Footer(f)[40] = 1; }, true); }},
      {Open("F5_index_offset_unaligned", "F5", "index_offset moved 8 bytes on"),
       [] {
         return EditBytes([](std::string& f) { PutU64(Footer(f), IndexStart(f) + 8); }, true);
       }},
      {Open("F5_index_offset_in_header", "F5", "index_offset 0"),
       [] { return EditBytes([](std::string& f) { PutU64(Footer(f), 0); }, true); }},
      {Open("F6_index_past_footer", "F6", "index_length as large as the file"),
       [] { return EditBytes([](std::string& f) { PutU64(Footer(f) + 8, f.size()); }, true); }},
      {Open("F8_block_before_footer", "F8",
            "a block of zeros between the index and the footer: the tail is longer than "
            "alignment needs"),
       [] {
         return EditBytes([](std::string& f) { f.insert(f.size() - kAlignment, kAlignment, '\0'); },
                          false);
       }},
      {Open("H5_header_minor", "H5", "header version 1.1, footer 1.0"),
       [] { return EditBytes([](std::string& f) { PutU16(At(f, 10), 1); }, false); }},
  };
}

std::vector<Recipe> ContainerRecipes() {
  return {
      {Open("X1_index_checksum", "X1", "one index byte changed, footer not updated"),
       [] {
         return EditBytes([](std::string& f) { *At(f, IndexStart(f) + 100) ^= 0x10; }, false);
       }},
      {Open("X2_identifier", "X2", "file identifier CKIY"),
       [] { return EditBytes([](std::string& f) { f[IndexStart(f) + 7] = 'Y'; }, true); }},
      {Open("X2_index_too_short", "X2",
            "index_length 4 (the rest of the old index stays, as non-zero padding)"),
       [] { return EditBytes([](std::string& f) { PutU64(Footer(f) + 8, 4); }, true); }},
      {Open("X3_root_outside", "X3", "the root offset points past the index"),
       [] {
         return EditBytes([](std::string& f) { PutU32(At(f, IndexStart(f)), 1u << 20); }, true);
       }},
      {Open("X3_vtable_outside", "X3", "the root table's vtable offset points past the index"),
       [] {
         return EditBytes(
             [](std::string& f) {
               const uint64_t root = IndexStart(f) + GetU32(At(f, IndexStart(f)));
               PutU32(At(f, root), static_cast<uint32_t>(-(1 << 20)));
             },
             true);
       }},
      {Open("X3_string_unterminated", "X3", "writer_name lacks its NUL terminator"),
       [] {
         return EditBytes(
             [](std::string& f) {
               const std::string name = Base().index.writer_name + std::string(1, '\0');
               f[f.find(name, IndexStart(f)) + name.size() - 1] = 'x';
             },
             true);
       }},
      {Open("X3_box_offsets_absent", "X3", "w's Box has no offsets (a required field)"),
       [] { return EditIndex([](RawIndex& r) { WPiece(r).region.omit_box_offsets = true; }); }},
      {Open("X3_union_wrong_table", "X3",
            "w's region is tagged Box but is a FlatRange table (so Box.offsets is absent)"),
       [] {
         return EditIndex([](RawIndex& r) { WPiece(r).region.region = Region::Flat(0, 16); });
       }},
      {Open("X4_duplicate_metadata_key", "X4", "metadata key step twice"),
       [] { return EditIndex([](RawIndex& r) {
              r.metadata.push_back({"step", "8"});
            }); }},
      {Open("X5_world_size_absent", "X5", "world_size not stored (reads as 0)"),
       [] { return EditIndex([](RawIndex& r) { r.world_size.reset(); }); }},
      {Open("X6_piece_rank", "X6", "a piece of sharded from rank 2 in a world of 2"),
       [] { return EditIndex([](RawIndex& r) { ShardedPieces(r)[1].rank = 2; }); }},
      {Open("X6_shard_rank", "X6", "a saved_layout shard of sharded from rank 9 in a world of 2"),
       [] {
         return EditIndex([](RawIndex& r) { TopEntry(r, "sharded").saved_layout->at(1).rank = 9; });
       }},
  };
}

std::vector<Recipe> PathRecipes() {
  return {
      {Open("P1_path_kind", "P1", "step's path component has kind 2"),
       [] { return EditIndex([](RawIndex& r) { TopEntry(r, "step").path[0].kind = 2; }); }},
      {Open("P2_key_absent", "P2", "a Key component without key"),
       [] { return EditIndex([](RawIndex& r) { r.entries[0].path[0].key.reset(); }); }},
      {Open("P2_key_with_index", "P2", "a Key component with index 1"),
       [] { return EditIndex([](RawIndex& r) { TopEntry(r, "step").path[0].index = 1; }); }},
      {Open("P3_index_with_key", "P3", "opt[0]'s Index component also has a key"),
       [] { return EditIndex([](RawIndex& r) { OptEntry(r, 1).path[1].key = "0"; }); }},
      {Open("P4_empty_path", "P4", "step has an empty path"),
       [] { return EditIndex([](RawIndex& r) { TopEntry(r, "step").path.clear(); }); }},
      {Open("P5_parent_missing", "P5", "an entry ghost/x with no entry ghost before it"),
       [] {
         return EditIndex([](RawIndex& r) {
           RawEntry ghost;
           ghost.path = {{0, "ghost", 0}, {0, "x", 0}};
           ghost.kind = static_cast<uint8_t>(EntryKind::kNone);
           r.entries.insert(r.entries.begin() + 1, ghost);
         });
       }},
      {Open("P5_not_contiguous", "P5", "opt[0].none comes after sharded, outside opt"),
       [] {
         return EditIndex([](RawIndex& r) {
           RawEntry none = OptEntry(r, 3);
           r.entries.erase(r.entries.begin() + 10);
           r.entries.push_back(none);
         });
       }},
      {Open("P6_index_under_dict", "P6", "a root entry named by a list index"),
       [] { return EditIndex([](RawIndex& r) {
              r.entries[0].path[0] = {1, std::nullopt, 0};
            }); }},
      {Open("P7_list_index_gap", "P7", "opt's first child is opt[1]"),
       [] {
         return EditIndex([](RawIndex& r) {
           for (size_t i = 1; i <= 3; ++i) OptEntry(r, i).path[1].index = 1;
         });
       }},
      {Open("P8_duplicate_path", "P8", "a second entry step"),
       [] { return EditIndex([](RawIndex& r) { r.entries.push_back(r.entries[0]); }); }},
  };
}

std::vector<Recipe> EntryRecipes() {
  auto set = [](std::string key, std::function<void(RawEntry&)> edit) {
    return [key, edit] { return EditIndex([&](RawIndex& r) { edit(TopEntry(r, key)); }); };
  };
  return {
      {Open("E1_kind_zero", "E1", "name has kind 0"), set("name", [](RawEntry& e) { e.kind = 0; })},
      {Open("E1_kind_ten", "E1", "name has kind 10"),
       set("name", [](RawEntry& e) { e.kind = 10; })},
      {Open("E2_int_with_shape", "E2", "the Int step has an empty shape"),
       set("step", [](RawEntry& e) { e.shape = Shape{}; })},
      {Open("E2_list_with_dtype", "E2", "the List opt has dtype 2"),
       set("opt", [](RawEntry& e) { e.dtype = 2; })},
      {Open("E3_int_with_string_value", "E3", "the Int step has a string_value"),
       set("step", [](RawEntry& e) { e.string_value = "7"; })},
      {Open("E3_float_with_int_value", "E3", "the Float lr has int_value 1"),
       set("lr", [](RawEntry& e) { e.int_value = 1; })},
      {Open("E4_string_absent", "E4", "the String name has no string_value"),
       set("name", [](RawEntry& e) { e.string_value.reset(); })},
      {Open("E5_tensor_with_int_value", "E5", "the Tensor w has int_value 3"),
       set("w", [](RawEntry& e) { e.int_value = 3; })},
      {Open("E6_bytes_without_content_type", "E6", "the Bytes blob has no content_type"),
       set("blob", [](RawEntry& e) { e.content_type.reset(); })},
      {Open("E6_tensor_with_content_type", "E6", "the Tensor w has a content_type"),
       set("w", [](RawEntry& e) { e.content_type = "raw"; })},
      {Open("E7_dtype_zero", "E7", "w has dtype 0"), set("w", [](RawEntry& e) { e.dtype = 0; })},
      {Open("E7_dtype_unknown", "E7", "w has dtype 18"),
       set("w", [](RawEntry& e) { e.dtype = 18; })},
      {Open("E8_shape_absent", "E8", "w has no shape"),
       set("w", [](RawEntry& e) { e.shape.reset(); })},
      {Open("E9_bytes_float32", "E9", "the Bytes blob has dtype float32"),
       set("blob", [](RawEntry& e) { e.dtype = 2; })},
      {Open("E9_bytes_two_dims", "E9", "the Bytes blob has shape [3, 4]"),
       set("blob",
           [](RawEntry& e) {
             e.shape = Shape{3, 4};
           })},
  };
}

// A float32 tensor `huge` with `shape` and no pieces, added to the root.
std::string WithHugeTensor(Shape shape) {
  return EditIndex([&](RawIndex& r) {
    RawEntry huge;
    huge.path = {{0, "huge", 0}};
    huge.kind = static_cast<uint8_t>(EntryKind::kTensor);
    huge.dtype = static_cast<uint8_t>(DType::kF32);
    huge.shape = shape;
    huge.pieces.emplace();
    r.entries.push_back(huge);
  });
}

std::vector<Recipe> GeometryRecipes() {
  return {
      {Open("T1_shape_overflow", "T1",
            "huge has shape [0, 2^40, 2^40]: no elements, but 2^80 without the zero"),
       [] {
         return WithHugeTensor({0, 1ull << 40, 1ull << 40});
       }},
      {Open("T1_bytes_overflow", "T1", "huge has shape [2^62] of float32: 2^64 bytes"),
       [] { return WithHugeTensor({1ull << 62}); }},
      {Open("G1_piece_region_type", "G1", "w's region has union tag 3"),
       [] { return EditIndex([](RawIndex& r) { WPiece(r).region.type = 3; }); }},
      {Open("G1_shard_region_type", "G1", "a saved_layout shard of sharded has union tag 0"),
       [] {
         return EditIndex(
             [](RawIndex& r) { TopEntry(r, "sharded").saved_layout->at(0).region.type = 0; });
       }},
      {Open("G2_box_rank", "G2", "w [4, 4] is stored as a 1-d box"),
       [] {
         return EditIndex([](RawIndex& r) { WPiece(r).region.region = Region::Box({0}, {16}); });
       }},
      {Open("G2_box_outside", "G2", "w's box covers rows 1 to 4 of 4"),
       [] {
         return EditIndex([](RawIndex& r) {
           WPiece(r).region.region = Region::Box({1, 0}, {4, 4});
         });
       }},
      {Open("G3_flat_outside", "G3", "rank 1's range of sharded is [4, 9) of 8 elements"),
       [] {
         return EditIndex(
             [](RawIndex& r) { ShardedPieces(r)[1].region.region = Region::Flat(4, 5); });
       }},
      {Open("T2_piece_missing", "T2", "sharded (not partial) lacks rank 1's piece"),
       [] { return EditIndex([](RawIndex& r) { ShardedPieces(r).pop_back(); }); }},
      {Open("T3_pieces_overlap", "T3",
            "sharded's pieces are [0, 4) and [2, 6): 8 elements in all, two of them twice"),
       [] {
         return EditIndex(
             [](RawIndex& r) { ShardedPieces(r)[1].region.region = Region::Flat(2, 4); });
       }},
  };
}

std::vector<Recipe> ChunkRecipes() {
  auto w_chunk = [](std::function<void(ChunkRecord&, uint64_t index_offset)> edit) {
    return
        [edit] { return EditIndex([&](RawIndex& r) { edit(WChunk(r), Base().IndexOffset()); }); };
  };
  return {
      {Open("C1_raw_size_zero", "C1", "w's chunk has raw_size 0"),
       w_chunk([](ChunkRecord& c, uint64_t) { c.raw_size = 0; })},
      {Open("C1_raw_size_not_multiple", "C1", "w's chunk (float32) has raw and stored size 63"),
       w_chunk([](ChunkRecord& c, uint64_t) { c.raw_size = c.stored_size = 63; })},
      {Open("C1_raw_size_too_large", "C1", "z's zstd chunk claims 2^30 + 4 raw bytes"),
       [] { return EditIndex([](RawIndex& r) { ZChunk(r).raw_size = (1ull << 30) + 4; }); }},
      {Open("C2_stored_size_zero", "C2", "z's chunk has stored_size 0"),
       [] { return EditIndex([](RawIndex& r) { ZChunk(r).stored_size = 0; }); }},
      {Open("C2_none_sizes_differ", "C2", "w's uncompressed chunk stores 65 bytes for 64"),
       w_chunk([](ChunkRecord& c, uint64_t) { c.stored_size = 65; })},
      {Open("C3_offset_unaligned", "C3", "w's chunk at offset 4104"),
       w_chunk([](ChunkRecord& c, uint64_t) { c.offset += 8; })},
      {Open("C3_offset_in_header", "C3", "w's chunk at offset 0"),
       w_chunk([](ChunkRecord& c, uint64_t) { c.offset = 0; })},
      {Open("C3_past_data_region", "C3", "w's chunk starts where the index does"),
       w_chunk([](ChunkRecord& c, uint64_t index_offset) { c.offset = index_offset; })},
      {Open("C4_piece_short", "C4", "w's one chunk holds 60 of its 64 bytes"),
       w_chunk([](ChunkRecord& c, uint64_t) { c.raw_size = c.stored_size = 60; })},
      {Open("C5_chunks_overlap", "C5", "both pieces of sharded name the same chunk"),
       [] {
         return EditIndex([](RawIndex& r) {
           ShardedPieces(r)[1].chunks->at(0) = ShardedPieces(r)[0].chunks->at(0);
         });
       }},
  };
}

std::vector<Recipe> DataRecipes() {
  auto chunk_of = [](std::string key) {
    return [key](std::function<void(std::string&)> edit) {
      return [key, edit] { return EditChunk(key, edit); };
    };
  };
  const auto z = chunk_of("z"), bp = chunk_of("bp");
  return {
      {Read("D1_chunk_checksum", "D1", kW,
            "one byte of w's stored bytes changed; index not updated"),
       [] {
         const uint64_t at = TopEntry(Base().index, "w").pieces[0].chunks[0].offset;
         return EditBytes([at](std::string& f) { f[at + 5] ^= 1; }, false);
       }},
      {Read("D2_unknown_codec", "D2", kW, "w's chunk has codec 7", StatusCode::kUnsupported),
       [] { return EditIndex([](RawIndex& r) { WChunk(r).codec = 7; }); }},
      {Read("D4_zstd_short", "D4", kZ, "z's frame decodes to 2048 of its 4096 bytes"),
       z([](std::string& s) { s = Encode(Codec::kZstd, 4, ZValues(512)); })},
      {Read("D4_zstd_not_a_frame", "D4", kZ,
            "z's stored bytes are its raw bytes, under codec zstd"),
       z([](std::string& s) { s = ZValues(1024); })},
      {Read("D4_zstd_second_frame", "D4", kZ, "z's frame is followed by an empty second frame"),
       z([](std::string& s) { s += Encode(Codec::kZstd, 1, ""); })},
      {Read("D4_zstd_skippable_frame", "D4", kZ, "z's frame follows a skippable frame"),
       z([](std::string& s) { s = std::string("\x50\x2a\x4d\x18\x04\0\0\0skip", 12) + s; })},
      {Read("D4_zstd_dictionary", "D4", kZ, "z's frame names dictionary 42"),
       z([](std::string& s) { s = RewriteZstdHeader(s, true, 0, 42); })},
      {Read("D4_zstd_window", "D4", kZ, "z's frame declares a window of 2^28 bytes"),
       z([](std::string& s) { s = RewriteZstdHeader(s, false, 28, 0); })},
      {Read("D5_element_size_zero", "D5", kBp, "bp's byte-plane header has E = 0"),
       bp([](std::string& s) { s[0] = 0; })},
      {Read("D5_reserved", "D5", kBp, "bp's byte-plane reserved byte is 1"),
       bp([](std::string& s) { s[1] = 1; })},
      {Read("D5_raw_size_not_multiple", "D5", kBp, "bp's byte-plane E = 3 does not divide 2048"),
       bp([](std::string& s) { s[0] = 3; })},
      {Read("D5_plane_mode", "D5", kBp, "bp's plane 0 has mode 2"),
       bp([](std::string& s) { s[2] = 2; })},
      {Read("D5_lengths_past_chunk", "D5", kBp, "bp's plane 0 is one byte longer than stored"),
       bp([](std::string& s) {
         PutU32(reinterpret_cast<uint8_t*>(s.data()) + 3,
                GetU32(reinterpret_cast<const uint8_t*>(s.data()) + 3) + 1);
       })},
      {Read("D5_raw_plane_length", "D5", kBp, "bp's raw planes hold 1022 and 1026 bytes"),
       bp([](std::string& s) {
         s = TwoPlanes(0, std::string(1022, 'a'), 0, std::string(1026, 'b'));
       })},
      {Read("D5_plane_not_a_frame", "D5", kBp, "bp's plane 0 has mode zstd but holds raw bytes"),
       bp([](std::string& s) {
         s = TwoPlanes(1, std::string(1024, 'a'), 0, std::string(1024, 'b'));
       })},
  };
}

const std::vector<Recipe>& Recipes() {
  static const std::vector<Recipe> all = [] {
    std::vector<Recipe> out;
    for (auto group : {LayoutRecipes, ContainerRecipes, PathRecipes, EntryRecipes, GeometryRecipes,
                       ChunkRecipes, DataRecipes}) {
      for (Recipe& r : group()) out.push_back(std::move(r));
    }
    return out;
  }();
  return all;
}

}  // namespace

const std::vector<InvalidVector>& InvalidVectors() {
  static const std::vector<InvalidVector> vectors = [] {
    std::vector<InvalidVector> out;
    for (const Recipe& r : Recipes()) out.push_back(r.vector);
    return out;
  }();
  return vectors;
}

std::string InvalidVectorBase() { return BaseFile(); }

std::string MakeInvalidVector(const std::string& name) {
  for (const Recipe& r : Recipes()) {
    if (r.vector.name == name) return r.make();
  }
  std::fprintf(stderr, "invalid vectors: no vector %s\n", name.c_str());
  std::abort();
}

std::string InvalidVectorManifest() {
  Json vectors = Json::array();
  for (const InvalidVector& v : InvalidVectors()) {
    vectors.push_back(
        {{"file", v.name + ".ckfmt"},
         {"rule", v.rule},
         {"refusal", v.refusal == StatusCode::kUnsupported ? "unsupported" : "corrupt"},
         {"stage", v.entry.empty() ? "open" : "read"},
         {"entry", v.entry.empty() ? Json(nullptr) : PathToJson(v.entry)},
         {"what", v.what}});
  }
  Json manifest = {{"base", "base.ckfmt"}, {"vectors", vectors}};
  return manifest.dump(1) + "\n";
}

Status WriteInvalidVectors(const std::string& dir) {
  auto write = [&](const std::string& name, const std::string& bytes) -> Status {
    const std::string path = dir + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    return out ? Status::OK() : Status::IOError(path + ": cannot write");
  };
  CKFMT_RETURN_IF_ERROR(write("base.ckfmt", InvalidVectorBase()));
  for (const Recipe& r : Recipes())
    CKFMT_RETURN_IF_ERROR(write(r.vector.name + ".ckfmt", r.make()));
  return write("invalid.json", InvalidVectorManifest());
}

}  // namespace ckfmt::tools
