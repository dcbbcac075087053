// Semantic checks of an index model (spec/FORMAT.md §6).
#include <algorithm>
#include <set>

#include "ckfmt/file_layout.h"
#include "ckfmt/index.h"

namespace ckfmt {

std::string_view EntryKindName(EntryKind k) {
  switch (k) {
    case EntryKind::kTensor: return "tensor";
    case EntryKind::kBytes: return "bytes";
    case EntryKind::kInt: return "int";
    case EntryKind::kFloat: return "float";
    case EntryKind::kBool: return "bool";
    case EntryKind::kString: return "string";
    case EntryKind::kNone: return "none";
    case EntryKind::kDict: return "dict";
    case EntryKind::kList: return "list";
  }
  return "unknown";
}

uint64_t EntryRecord::ByteSize() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n * DTypeSize(dtype);
}

uint64_t EntryRecord::StoredSize() const {
  uint64_t n = 0;
  for (const auto& p : pieces) {
    for (const auto& c : p.chunks) n += c.stored_size;
  }
  return n;
}

namespace {

bool BoxesIntersect(const Region& a, const Region& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (a.offsets[d] + a.lengths[d] <= b.offsets[d] || b.offsets[d] + b.lengths[d] <= a.offsets[d]) {
      return false;
    }
  }
  return true;
}

Status Overlap(const EntryRecord& e, const Region& a, const Region& b) {
  return Status::Corruption("pieces " + a.ToString() + " and " + b.ToString() + " of " +
                            FormatKeyPath(e.path) + " overlap" + SpecRule("T3"));
}

// Disjointness. Flat ranges: sort and sweep. Boxes: sweep on dim 0 (0-d
// boxes hold one element, so two of them overlap). Sorts the vectors.
template <typename Charge>
Status FindOverlap(const EntryRecord& e, std::vector<const Region*>& flats,
                   std::vector<const Region*>& boxes, Charge& charge) {
  std::sort(flats.begin(), flats.end(), [](auto* a, auto* b) { return a->start < b->start; });
  for (size_t i = 1; i < flats.size(); ++i) {
    if (flats[i - 1]->start + flats[i - 1]->length > flats[i]->start) {
      return Overlap(e, *flats[i - 1], *flats[i]);
    }
  }
  if (!e.shape.empty()) {
    std::sort(boxes.begin(), boxes.end(),
              [](auto* a, auto* b) { return a->offsets[0] < b->offsets[0]; });
  }
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      if (!e.shape.empty() && boxes[j]->offsets[0] >= boxes[i]->offsets[0] + boxes[i]->lengths[0]) {
        break;
      }
      CKFMT_RETURN_IF_ERROR(charge(1));
      if (BoxesIntersect(*boxes[i], *boxes[j])) return Overlap(e, *boxes[i], *boxes[j]);
    }
  }
  // A flat range and a box can share an element only if their spans of
  // flat indices meet. The flat ranges are disjoint and sorted, so those
  // that meet a box's span are consecutive: only they are compared, each
  // at O(rank^2) (RegionsIntersect), charged as (rank + 1)^2 comparisons.
  const uint64_t pair_cost = (e.shape.size() + 1) * (e.shape.size() + 1);
  for (const Region* b : boxes) {
    if (flats.empty()) break;
    const FlatSpan span = FlatSpanOf(e.shape, *b);
    auto f = std::partition_point(flats.begin(), flats.end(), [&](const Region* r) {
      return r->start + r->length <= span.begin;
    });
    for (; f != flats.end() && (*f)->start < span.end; ++f) {
      CKFMT_RETURN_IF_ERROR(charge(pair_cost));
      if (RegionsIntersect(e.shape, **f, *b)) return Overlap(e, **f, *b);
    }
  }
  return Status::OK();
}

}  // namespace

Status CheckCoverage(const EntryRecord& e, uint64_t* budget) {
  uint64_t own_budget = kCoverageBudget;
  if (!budget) budget = &own_budget;
  auto charge = [&](uint64_t units) {
    if (*budget < units) {
      return Status::Unsupported(
          FormatKeyPath(e.path) + ": checking that its " + std::to_string(e.pieces.size()) +
          " pieces do not overlap exceeds what is left of the reader's work limit (2^26 region "
          "comparisons per index, shared by all its entries)" + SpecRule("T3"));
    }
    *budget -= units;
    return Status::OK();
  };
  uint64_t total = 1, covered = 0;
  for (uint64_t d : e.shape) total *= d;
  // More elements than the tensor holds means two pieces overlap (regions
  // are in bounds): the sweep below names them. `covered` saturates.
  bool excess = false;
  std::vector<const Region*> flats, boxes;
  for (const auto& p : e.pieces) {
    uint64_t n = p.region.NumElements();
    if (n == 0) continue;
    if (n > total - covered) {
      excess = true;
      covered = total;
    } else {
      covered += n;
    }
    (p.region.kind == Region::Kind::kFlat ? flats : boxes).push_back(&p.region);
  }
  if (!excess && !e.partial && covered != total) {
    return Status::Corruption(FormatKeyPath(e.path) + ": pieces cover " + std::to_string(covered) +
                              " of " + std::to_string(total) +
                              " elements and the entry is not marked partial" + SpecRule("T2"));
  }
  Status overlap = FindOverlap(e, flats, boxes, charge);
  if (excess && overlap.code() != StatusCode::kCorruption) {
    // Only if the work limit stopped the sweep: the count alone proves it.
    return Status::Corruption(FormatKeyPath(e.path) + ": pieces hold more elements than the "
                              "tensor's " + std::to_string(total) + SpecRule("T2"));
  }
  return overlap;
}

namespace {

// A container whose children may still follow (pre-order keeps them
// contiguous, so only the containers on the path to the last entry are open).
// A chunk's stored bytes, and the entry they belong to (for messages).
struct Extent {
  uint64_t offset, size;
  const EntryRecord* entry;
  bool operator<(const Extent& o) const { return offset < o.offset; }
};

struct OpenContainer {
  KeyPath path;
  EntryKind kind;
  uint64_t next_child = 0;             // lists: the index the next child must have
  std::set<std::string> keys;          // dicts: keys seen so far
};

Status CheckData(const EntryRecord& e, const std::string& where, uint64_t data_begin,
                 uint64_t data_end, uint32_t world_size, uint64_t* budget,
                 std::vector<Extent>& extents) {
  auto err = [&](const std::string& m, const char* rule) {
    return Status::Corruption(where + ": " + m + SpecRule(rule));
  };
  auto region_rule = [](const Region& r) { return r.kind == Region::Kind::kFlat ? "G3" : "G2"; };
  if (e.kind == EntryKind::kBytes && (e.dtype != DType::kU8 || e.shape.size() != 1)) {
    return err("bytes entry must be a 1-d uint8 array", "E9");
  }
  auto numel = NumElements(e.shape);
  if (!numel.ok()) return err(numel.status().message(), "T1");
  const uint64_t esize = DTypeSize(e.dtype);
  if (!ShapeBytes(e.shape, esize).ok()) return err("tensor byte size overflows 64 bits", "T1");
  for (const auto& p : e.pieces) {
    if (p.rank >= world_size) {
      return err("piece from rank " + std::to_string(p.rank) + " but the world size is " +
                 std::to_string(world_size), "X6");
    }
    if (Status s = ValidateRegion(p.region, e.shape); !s.ok()) {
      return err(s.message(), region_rule(p.region));
    }
    uint64_t want = p.region.NumElements() * esize, have = 0;
    for (const auto& c : p.chunks) {
      std::string chunk = "chunk at offset " + std::to_string(c.offset);
      if (c.raw_size == 0 || c.raw_size % esize != 0 || c.raw_size > kMaxChunkRawSize) {
        return err(chunk + " has raw size " + std::to_string(c.raw_size) +
                   "; expected a positive multiple of " + std::to_string(esize) + " up to " +
                   std::to_string(kMaxChunkRawSize), "C1");
      }
      if (c.stored_size == 0 || (c.codec == uint8_t(Codec::kNone) && c.stored_size != c.raw_size)) {
        return err(chunk + " has stored size " + std::to_string(c.stored_size) +
                   " for raw size " + std::to_string(c.raw_size), "C2");
      }
      if (!IsAligned(c.offset) || c.offset < data_begin || c.offset > data_end ||
          c.stored_size > data_end - c.offset) {
        return err(chunk + " (+" + std::to_string(c.stored_size) +
                   ") is unaligned or outside the data region [" + std::to_string(data_begin) +
                   ", " + std::to_string(data_end) + ")", "C3");
      }
      if (c.raw_size > want - have) {
        return err("chunks hold more than the piece's " + std::to_string(want) + " bytes", "C4");
      }
      have += c.raw_size;
      extents.push_back({c.offset, c.stored_size, &e});
    }
    if (have != want) {
      return err("chunks of piece " + p.region.ToString() + " hold " + std::to_string(have) +
                 " bytes; expected " + std::to_string(want), "C4");
    }
  }
  for (const auto& s : e.saved_layout) {
    if (s.rank >= world_size) {
      return err("saved layout names rank " + std::to_string(s.rank) + " but the world size is " +
                 std::to_string(world_size), "X6");
    }
    if (Status st = ValidateRegion(s.region, e.shape); !st.ok()) {
      return err("saved layout: " + st.message(), region_rule(s.region));
    }
  }
  if (Status s = CheckCoverage(e, budget); !s.ok()) return Status(s.code(), where + ": " + s.message());
  return Status::OK();
}

}  // namespace

Status ValidateIndex(const IndexRecord& index, uint64_t data_begin, uint64_t data_end,
                     const std::string& file) {
  if (index.world_size == 0) {
    return Status::Corruption(file + ": index world_size is 0" + SpecRule("X5"));
  }
  std::set<std::string> meta_keys;
  for (const auto& [k, v] : index.metadata) {
    if (!meta_keys.insert(k).second) {
      return Status::Corruption(file + ": user metadata key \"" + k + "\" appears twice" +
                                SpecRule("X4"));
    }
  }
  std::vector<OpenContainer> open;
  open.push_back({KeyPath{}, EntryKind::kDict, 0, {}});
  std::vector<Extent> extents;
  uint64_t budget = kCoverageBudget;
  for (size_t i = 0; i < index.entries.size(); ++i) {
    const EntryRecord& e = index.entries[i];
    std::string where = file + ": index entry " + std::to_string(i) + " (" +
                        FormatKeyPath(e.path) + ")";
    if (e.path.empty()) return Status::Corruption(where + ": empty key path" + SpecRule("P4"));
    KeyPath parent(e.path.begin(), e.path.end() - 1);
    while (!open.empty() && open.back().path != parent) open.pop_back();
    if (open.empty()) {
      return Status::Corruption(where + ": entries are not in pre-order, or its parent is not "
                                "a dict or list entry" + SpecRule("P5"));
    }
    OpenContainer& top = open.back();
    const PathComponent& last = e.path.back();
    if (top.kind == EntryKind::kDict) {
      const std::string* key = std::get_if<std::string>(&last);
      if (!key) return Status::Corruption(where + ": a list index inside a dict" + SpecRule("P6"));
      if (!top.keys.insert(*key).second) {
        return Status::Corruption(where + ": duplicate key path" + SpecRule("P8"));
      }
    } else {
      const uint64_t* idx = std::get_if<uint64_t>(&last);
      if (!idx || *idx != top.next_child) {
        return Status::Corruption(where + ": list children must be indices in order; expected [" +
                                  std::to_string(top.next_child) + "]" + SpecRule("P7"));
      }
      ++top.next_child;
    }
    if (e.IsContainer()) open.push_back({e.path, e.kind, 0, {}});
    if (e.HasData()) {
      CKFMT_RETURN_IF_ERROR(
          CheckData(e, where, data_begin, data_end, index.world_size, &budget, extents));
    }
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i - 1].offset + extents[i - 1].size > extents[i].offset) {
      return Status::Corruption(file + ": the chunk at offset " +
                                std::to_string(extents[i - 1].offset) + " (" +
                                FormatKeyPath(extents[i - 1].entry->path) +
                                ") overlaps the chunk at offset " +
                                std::to_string(extents[i].offset) + " (" +
                                FormatKeyPath(extents[i].entry->path) + ")" + SpecRule("C5"));
    }
  }
  return Status::OK();
}

}  // namespace ckfmt
