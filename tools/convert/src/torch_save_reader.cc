#include "torch_save_reader.h"

#include <cstring>
#include <map>

#include "crc32.h"
#include "pickle_globals.h"
#include "unpickler.h"

namespace ckfmt::convert {
namespace {

constexpr uint64_t kMaxPickleBytes = 1ull << 30;
// 0x1950a86a20f9469cfc6c, little-endian.
const uint8_t kLegacyMagic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

// Parses a storage persistent id's type: a typed storage class or
// UntypedStorage.
Status StorageType(const py::Object& cls, py::Storage* st, const std::string& where) {
  if (cls.kind != py::Kind::kGlobal) {
    return Status::Corruption(where + ": storage type is " + py::Describe(cls));
  }
  if (cls.s2 == "UntypedStorage") {
    st->untyped = true;
    st->dtype = DType::kU8;
    return Status::OK();
  }
  auto dt = DTypeOfStorageClass(cls.s2);
  if (!dt || cls.s != "torch") {
    return Status::Unsupported(where + ": storage type " + cls.GlobalName() +
                               " is not supported (quantized storages are not)");
  }
  st->dtype = *dt;
  return Status::OK();
}

Result<std::string> Str(const py::Object& o, const std::string& what, const std::string& where) {
  if (o.kind != py::Kind::kStr) {
    return Status::Corruption(where + ": " + what + " is " + py::Describe(o) + ", expected str");
  }
  return o.s;
}

// Tracks a CRC over sequential reads of a record and checks it once the
// record has been read through from its start.
struct CrcTracker {
  uint64_t next = 0;
  uint32_t crc = 0;
  bool done = false;
};

}  // namespace

bool LooksLikeTorchLegacy(const uint8_t* p, size_t n) {
  return n >= 14 && p[0] == 0x80 && p[2] == 0x8a && p[3] == 10 &&
         std::memcmp(p + 4, kLegacyMagic, 10) == 0;
}

Result<Node> ReadTorchZip(std::shared_ptr<ZipArchive> zip, const TorchReadOptions& options,
                          ConvertLog* log) {
  // The records sit under one top-level folder whose name varies.
  const ZipRecord* pkl = nullptr;
  std::string prefix;
  for (const auto& r : zip->records()) {
    const std::string& n = r.name;
    size_t slash = n.find('/');
    bool match = n == "data.pkl" || (slash != std::string::npos && n.substr(slash) == "/data.pkl");
    if (!match) continue;
    if (pkl) {
      return Status::Corruption(zip->label() + ": two data.pkl records (" + pkl->name + ", " + n +
                                "): ambiguous archive");
    }
    pkl = &r;
    prefix = slash == std::string::npos ? "" : n.substr(0, slash + 1);
  }
  if (!pkl) {
    return Status::Corruption(zip->label() + ": no data.pkl record: not a torch.save archive");
  }
  if (const ZipRecord* bo = zip->Find(prefix + "byteorder")) {
    CKFMT_ASSIGN_OR_RETURN(std::string order, zip->ReadAll(*bo, 64));
    if (order != "little") {
      return Status::Unsupported(zip->Where(*bo) + ": byte order \"" + order +
                                 "\" (only little-endian archives are supported)");
    }
  }
  CKFMT_ASSIGN_OR_RETURN(std::string pickle, zip->ReadAll(*pkl, kMaxPickleBytes));

  std::map<std::string, py::Ref> storages;
  UnpickleOptions uo;
  uo.where = zip->Where(*pkl);
  uo.allow_opaque = options.allow_opaque;
  uo.persistent_load = [&](const py::Ref& pid) -> Result<py::Ref> {
    const std::string where = uo.where + ": persistent id";
    if (pid->kind != py::Kind::kTuple || pid->items.size() != 5) {
      return Status::Corruption(where + " is " + py::Describe(*pid) +
                                ", expected ('storage', type, key, location, numel)");
    }
    const auto& a = pid->items;
    CKFMT_ASSIGN_OR_RETURN(std::string tag, Str(*a[0], "tag", where));
    if (tag != "storage") return Status::Unsupported(where + ": kind \"" + tag + "\"");
    auto st = std::make_shared<py::Storage>();
    CKFMT_RETURN_IF_ERROR(StorageType(*a[1], st.get(), where));
    CKFMT_ASSIGN_OR_RETURN(st->key, Str(*a[2], "key", where));
    CKFMT_ASSIGN_OR_RETURN(st->location, Str(*a[3], "location", where));
    if (a[4]->kind != py::Kind::kInt || a[4]->i < 0) {
      return Status::Corruption(where + ": numel is " + py::Describe(*a[4]));
    }
    st->numel = static_cast<uint64_t>(a[4]->i);
    auto it = storages.find(st->key);
    if (it != storages.end()) {
      const py::Storage& old = *it->second->storage;
      if (old.dtype != st->dtype || old.numel != st->numel) {
        return Status::Corruption(where + ": storage " + st->key +
                                  " is declared twice with different types or sizes");
      }
      return it->second;
    }
    auto o = py::Make(py::Kind::kStorage);
    o->storage = st;
    storages.emplace(st->key, o);
    return o;
  };
  CKFMT_ASSIGN_OR_RETURN(py::Ref root, Unpickle(pickle, uo));

  std::map<std::string, std::shared_ptr<CrcTracker>> crcs;
  PyToTreeOptions to;
  to.allow_opaque = options.allow_opaque;
  to.where = zip->label();
  to.make_tensor = [&](const py::TensorRef& t,
                       const std::string& key) -> Result<std::shared_ptr<TensorSource>> {
    const py::Storage& st = *t.storage->storage;
    std::string name = prefix + "data/" + st.key;
    const ZipRecord* rec = zip->Find(name);
    std::string where = zip->label() + ": tensor " + KeyForMessage(key);
    if (!rec) return Status::Corruption(where + ": storage record " + name + " is missing");
    uint64_t declared = st.numel * (st.untyped ? 1 : DTypeSize(st.dtype));
    if (rec->size != declared) {
      return Status::Corruption(zip->Where(*rec) + ": holds " + std::to_string(rec->size) +
                                " bytes but the pickle declares " + std::to_string(st.numel) +
                                " elements (" + std::to_string(declared) + " bytes)");
    }
    auto& crc = crcs[name];
    if (!crc) crc = std::make_shared<CrcTracker>();
    StorageReadFn read = [zip, rec, crc, verify = options.verify_crc](
                             uint64_t off, void* dst, uint64_t n) -> Status {
      CKFMT_RETURN_IF_ERROR(zip->Read(*rec, off, dst, n));
      if (verify && !crc->done && off == crc->next) {
        crc->crc = Crc32(crc->crc, dst, n);
        crc->next += n;
        if (crc->next == rec->size) {
          crc->done = true;
          if (crc->crc != rec->crc32) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "0x%08x != recorded 0x%08x", crc->crc, rec->crc32);
            return Status::Corruption(zip->Where(*rec) + ": CRC-32 " + buf);
          }
        }
      }
      return Status::OK();
    };
    return StridedTensorSource::Create(t.dtype, t.size, t.stride, t.offset, rec->size,
                                       std::move(read), where);
  };
  return PyToTree(root, to, log);
}

Result<Node> ReadTorchLegacy(std::shared_ptr<InputFile> file, const TorchReadOptions& options,
                             ConvertLog* log) {
  const std::string& path = file->path();
  FileSource src(file, 0);
  UnpickleOptions plain;
  plain.where = path;
  CKFMT_ASSIGN_OR_RETURN(py::Ref magic, Unpickle(src, plain));
  if (magic->kind != py::Kind::kBigInt || magic->s.size() != 10 ||
      std::memcmp(magic->s.data(), kLegacyMagic, 10) != 0) {
    return Status::Corruption(path + ": not a legacy torch.save file (wrong magic number)");
  }
  CKFMT_ASSIGN_OR_RETURN(py::Ref version, Unpickle(src, plain));
  if (version->kind != py::Kind::kInt || version->i != 1001) {
    return Status::Unsupported(path + ": legacy protocol version " + py::Describe(*version) +
                               " (expected 1001)");
  }
  CKFMT_ASSIGN_OR_RETURN(py::Ref sys_info, Unpickle(src, plain));
  if (sys_info->kind == py::Kind::kDict) {
    for (const auto& [k, v] : sys_info->dict) {
      if (k->kind == py::Kind::kStr && k->s == "little_endian" && v->kind == py::Kind::kBool &&
          !v->b) {
        return Status::Unsupported(path + ": big-endian legacy checkpoints are not supported");
      }
    }
  }
  // Storages by root key; their element size is known from the ids.
  std::map<std::string, py::Ref> roots;
  UnpickleOptions uo;
  uo.where = path + ": object pickle";
  uo.allow_opaque = options.allow_opaque;
  uo.persistent_load = [&](const py::Ref& pid) -> Result<py::Ref> {
    const std::string where = uo.where + ": persistent id";
    if (pid->kind != py::Kind::kTuple || pid->items.empty()) {
      return Status::Corruption(where + " is " + py::Describe(*pid));
    }
    const auto& a = pid->items;
    CKFMT_ASSIGN_OR_RETURN(std::string tag, Str(*a[0], "tag", where));
    if (tag == "module") {
      return Status::Unsupported(where + ": the file pickles a whole nn.Module class; only "
                                 "state dicts can be converted");
    }
    if (tag != "storage" || a.size() != 6) {
      return Status::Corruption(where + ": expected ('storage', type, key, location, numel, "
                                "view_metadata)");
    }
    py::Storage st;
    CKFMT_RETURN_IF_ERROR(StorageType(*a[1], &st, where));
    CKFMT_ASSIGN_OR_RETURN(std::string root_key, Str(*a[2], "key", where));
    CKFMT_ASSIGN_OR_RETURN(st.location, Str(*a[3], "location", where));
    if (a[4]->kind != py::Kind::kInt || a[4]->i < 0) {
      return Status::Corruption(where + ": numel is " + py::Describe(*a[4]));
    }
    st.numel = static_cast<uint64_t>(a[4]->i);
    st.key = root_key;
    auto it = roots.find(root_key);
    if (it == roots.end()) {
      auto o = py::Make(py::Kind::kStorage);
      o->storage = std::make_shared<py::Storage>(st);
      it = roots.emplace(root_key, o).first;
    } else if (it->second->storage->dtype != st.dtype) {
      return Status::Corruption(where + ": storage " + root_key + " has two element types");
    }
    const py::Object& view = *a[5];
    if (view.kind == py::Kind::kNone) return it->second;
    // (view_key, offset, view_size): a view into the root storage.
    if (view.kind != py::Kind::kTuple || view.items.size() != 3 ||
        view.items[1]->kind != py::Kind::kInt || view.items[2]->kind != py::Kind::kInt ||
        view.items[1]->i < 0 || view.items[2]->i < 0) {
      return Status::Corruption(where + ": bad view metadata " + py::Describe(view));
    }
    auto o = py::Make(py::Kind::kStorage);
    o->storage = std::make_shared<py::Storage>(st);
    o->storage->view_offset = static_cast<uint64_t>(view.items[1]->i);
    o->storage->numel = static_cast<uint64_t>(view.items[2]->i);
    return o;
  };
  CKFMT_ASSIGN_OR_RETURN(py::Ref root, Unpickle(src, uo));
  plain.where = path + ": storage keys";
  CKFMT_ASSIGN_OR_RETURN(py::Ref keys, Unpickle(src, plain));
  if (keys->kind != py::Kind::kList) {
    return Status::Corruption(path + ": storage key list is " + py::Describe(*keys));
  }
  // Locate each storage: an 8-byte element count, then the bytes.
  struct Loc {
    uint64_t data = 0, bytes = 0;
  };
  std::map<std::string, Loc> locs;
  uint64_t pos = src.position();
  for (const auto& k : keys->items) {
    CKFMT_ASSIGN_OR_RETURN(std::string key, Str(*k, "storage key", path));
    auto it = roots.find(key);
    if (it == roots.end()) {
      return Status::Corruption(path + ": storage " + key +
                                " is listed but no tensor uses it (its element size is unknown)");
    }
    const py::Storage& st = *it->second->storage;
    uint8_t cnt[8];
    CKFMT_RETURN_IF_ERROR(file->ReadAt(pos, cnt, 8, "storage " + key + " element count"));
    uint64_t count = 0;
    for (int i = 7; i >= 0; --i) count = (count << 8) | cnt[i];
    uint64_t esize = st.untyped ? 1 : DTypeSize(st.dtype);
    if (count > (file->size() - pos - 8) / esize) {
      return Status::Corruption(path + ": storage " + key + " claims " + std::to_string(count) +
                                " elements at offset " + std::to_string(pos) +
                                ", past the end of the file (truncated or lying sizes)");
    }
    if (count != st.numel) {
      return Status::Corruption(path + ": storage " + key + " has " + std::to_string(count) +
                                " elements but the pickle declares " + std::to_string(st.numel));
    }
    if (!locs.emplace(key, Loc{pos + 8, count * esize}).second) {
      return Status::Corruption(path + ": storage " + key + " is listed twice");
    }
    pos += 8 + count * esize;
  }
  PyToTreeOptions to;
  to.allow_opaque = options.allow_opaque;
  to.where = path;
  to.make_tensor = [&](const py::TensorRef& t,
                       const std::string& key) -> Result<std::shared_ptr<TensorSource>> {
    const py::Storage& st = *t.storage->storage;
    std::string where = path + ": tensor " + KeyForMessage(key);
    auto it = locs.find(st.key);
    if (it == locs.end()) {
      return Status::Corruption(where + ": storage " + st.key + " is not in the storage list");
    }
    uint64_t esize = st.untyped ? 1 : DTypeSize(st.dtype);
    uint64_t view_bytes = st.view_offset * esize;
    if (view_bytes > it->second.bytes || st.numel * esize > it->second.bytes - view_bytes) {
      return Status::Corruption(where + ": view of storage " + st.key + " lies outside it");
    }
    uint64_t base = it->second.data + view_bytes;
    StorageReadFn read = [file, base, key = st.key](uint64_t off, void* dst, uint64_t n) {
      return file->ReadAt(base + off, dst, n, "storage " + key);
    };
    return StridedTensorSource::Create(t.dtype, t.size, t.stride, t.offset, st.numel * esize,
                                       std::move(read), where);
  };
  return PyToTree(root, to, log);
}

}  // namespace ckfmt::convert
