#include "vectors.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>

#include "ckfmt/describe.h"
#include "ckfmt/writer.h"
#include "inspect.h"

namespace ckfmt::tools {
namespace {

// Options every vector starts from; durability is irrelevant here.
SaveOptions BaseOptions(const IoOptions& io) {
  SaveOptions o;
  o.io = io;
  o.fsync = false;
  return o;
}

// Keeps tensor memory alive until the save is done.
class Arena {
 public:
  template <typename T>
  Tensor Make(DType dtype, Shape shape, std::vector<T> values) {
    auto& buf = bufs_.emplace_back(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(buf.data(), values.data(), buf.size());
    return Tensor::View(dtype, std::move(shape), buf.data());
  }
  void* Keep(std::vector<uint8_t> bytes) { return bufs_.emplace_back(std::move(bytes)).data(); }

 private:
  std::deque<std::vector<uint8_t>> bufs_;
};

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

uint16_t ToBF16(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }

Status SaveDict(const std::string& path, Dict root, const SaveOptions& options) {
  auto r = Save(path, Value(std::move(root)), options);
  return r.ok() ? Status::OK() : r.status();
}

// Nothing at all: spec/FORMAT.md Appendix B.3.
Status WriteEmpty(const std::string& path, const IoOptions& io) {
  return SaveDict(path, Dict{}, BaseOptions(io));
}

// Every scalar kind, empty containers, nested lists, awkward keys.
Status WriteScalars(const std::string& path, const IoOptions& io) {
  Dict root;
  root.Set("int", Value(int64_t{42}));
  root.Set("int_min", Value(std::numeric_limits<int64_t>::min()));
  root.Set("int_max", Value(std::numeric_limits<int64_t>::max()));
  root.Set("zero", Value(0));
  root.Set("float", Value(3.25));
  root.Set("pi", Value(3.141592653589793));
  root.Set("tiny", Value(5e-324));
  root.Set("huge", Value(1.7976931348623157e308));
  root.Set("neg", Value(-0.1));
  root.Set("neg_zero", Value(-0.0));
  root.Set("nan", Value(std::numeric_limits<double>::quiet_NaN()));
  root.Set("inf", Value(std::numeric_limits<double>::infinity()));
  root.Set("neg_inf", Value(-std::numeric_limits<double>::infinity()));
  root.Set("true", Value(true));
  root.Set("false", Value(false));
  root.Set("string", Value("hello"));
  root.Set("empty_string", Value(""));
  root.Set("unicode", Value("h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c\u8a9e \U0001F642"));
  static const char kEscapes[] = "quote\" backslash\\ newline\n tab\t ctrl\x01 nul\0 end";
  root.Set("escapes", Value(std::string(kEscapes, sizeof kEscapes - 1)));
  root.Set("none", Value(None{}));
  root.Set("empty_dict", Value(Dict{}));
  root.Set("empty_list", Value(List{}));

  Dict keys;
  keys.Set("a/b", Value(1));
  keys.Set("back\\slash", Value(2));
  keys.Set("", Value("empty key"));
  keys.Set("dots.in.key", Value(3));
  keys.Set("[0]", Value("a key, not an index"));
  keys.Set(" spaces ", Value(4));
  keys.Set("\u043a\u043b\u044e\u0447 \U0001F511", Value(5));
  Dict deep;
  deep.Set("leaf", Value("deep"));
  Dict deeper;
  deeper.Set("d", Value(deep));
  keys.Set("nested", Value(deeper));
  root.Set("keys", Value(std::move(keys)));

  Dict in_list;
  in_list.Set("k", Value(true));
  List inner{Value(3.5), Value(None{})};
  List list{Value(1), Value("two"), Value(inner), Value(in_list), Value(List{}), Value(Dict{})};
  root.Set("list", Value(std::move(list)));

  List state;
  for (int i = 0; i < 2; ++i) {
    Dict s;
    s.Set("step", Value(10 + i));
    s.Set("lr", Value(0.001 / (i + 1)));
    state.push_back(Value(std::move(s)));
  }
  Dict optim;
  optim.Set("state", Value(std::move(state)));
  root.Set("optim", Value(std::move(optim)));

  SaveOptions o = BaseOptions(io);
  o.metadata = {{"vector", "scalars"}, {"empty", ""}, {"unicode \u2713", "\u65e5\u672c"}};
  return SaveDict(path, std::move(root), o);
}

// One small tensor of every dtype with meaningful values, plus 0-d,
// zero-size and higher-rank shapes.
Status WriteDTypes(const std::string& path, const IoOptions& io) {
  Arena a;
  const Shape s{2, 3};
  Dict d;
  const float inf = std::numeric_limits<float>::infinity();
  d.Set("float64", Value(a.Make<double>(DType::kF64, s, {0, 1, -2, 0.5, 1e300, -1e-300})));
  d.Set("float32", Value(a.Make<float>(DType::kF32, s, {0, 1, -2, 0.5, 3.4028235e38f, inf})));
  // 0, 1, -2, 0.5, 65504 (max), inf
  d.Set("float16", Value(a.Make<uint16_t>(DType::kF16, s,
                                          {0x0000, 0x3C00, 0xC000, 0x3800, 0x7BFF, 0x7C00})));
  d.Set("bfloat16", Value(a.Make<uint16_t>(DType::kBF16, s,
                                           {ToBF16(0), ToBF16(1), ToBF16(-2), ToBF16(0.5f),
                                            ToBF16(3.140625f), ToBF16(inf)})));
  // 0, 1, -2, 0.5, 448 (max), nan
  d.Set("float8_e4m3fn",
        Value(a.Make<uint8_t>(DType::kF8E4M3FN, s, {0x00, 0x38, 0xC0, 0x30, 0x7E, 0x7F})));
  // 0, 1, -2, 0.5, 57344 (max), inf
  d.Set("float8_e5m2",
        Value(a.Make<uint8_t>(DType::kF8E5M2, s, {0x00, 0x3C, 0xC0, 0x38, 0x7B, 0x7C})));
  d.Set("int64", Value(a.Make<int64_t>(DType::kI64, s,
                                       {0, 1, -1, std::numeric_limits<int64_t>::min(),
                                        std::numeric_limits<int64_t>::max(), 42})));
  d.Set("int32", Value(a.Make<int32_t>(DType::kI32, s,
                                       {0, 1, -1, std::numeric_limits<int32_t>::min(),
                                        std::numeric_limits<int32_t>::max(), 42})));
  d.Set("int16", Value(a.Make<int16_t>(DType::kI16, s, {0, 1, -1, -32768, 32767, 42})));
  d.Set("int8", Value(a.Make<int8_t>(DType::kI8, s, {0, 1, -1, -128, 127, 42})));
  d.Set("uint8", Value(a.Make<uint8_t>(DType::kU8, s, {0, 1, 2, 254, 255, 42})));
  d.Set("bool", Value(a.Make<uint8_t>(DType::kBool, s, {0, 1, 1, 0, 1, 0})));
  d.Set("complex64", Value(a.Make<float>(DType::kC64, s,
                                         {0, 0, 1, 0, 0, 1, -1, -1, 0.5f, 2, inf, -inf})));
  d.Set("complex128", Value(a.Make<double>(DType::kC128, s,
                                           {0, 0, 1, 0, 0, 1, -1, -1, 0.5, 2, 1e300, -1e-300})));
  d.Set("uint16", Value(a.Make<uint16_t>(DType::kU16, s, {0, 1, 2, 65534, 65535, 42})));
  d.Set("uint32", Value(a.Make<uint32_t>(DType::kU32, s, {0, 1, 2, 4294967294u, 4294967295u, 42})));
  d.Set("uint64", Value(a.Make<uint64_t>(DType::kU64, s,
                                         {0, 1, 2, std::numeric_limits<uint64_t>::max() - 1,
                                          std::numeric_limits<uint64_t>::max(), 42})));
  Dict shapes;
  shapes.Set("scalar_0d", Value(a.Make<float>(DType::kF32, {}, {1.5f})));
  shapes.Set("zero_size", Value(a.Make<float>(DType::kF32, {0}, {})));
  shapes.Set("zero_size_2d", Value(a.Make<int64_t>(DType::kI64, {3, 0}, {})));
  shapes.Set("rank5", Value(a.Make<uint8_t>(DType::kU8, {1, 2, 1, 3, 1}, {1, 2, 3, 4, 5, 6})));
  Dict root;
  root.Set("dtypes", Value(std::move(d)));
  root.Set("shapes", Value(std::move(shapes)));
  SaveOptions o = BaseOptions(io);
  o.metadata = {{"vector", "dtypes"}};
  return SaveDict(path, std::move(root), o);
}

// Tensors stored as pieces from ranks 0..3, through the streaming writer.
Status WriteSharded(const std::string& path, const IoOptions& io) {
  SaveOptions o = BaseOptions(io);
  o.world_size = 4;
  o.save_mode = "parallel";
  o.metadata = {{"vector", "sharded"}, {"step", "1000"}};
  CKFMT_ASSIGN_OR_RETURN(auto w, CheckpointWriter::Create(path, o));
  using P = KeyPath;
  const P model{std::string("model")};
  CKFMT_RETURN_IF_ERROR(w->AddContainer(model, EntryKind::kDict));

  // model/w: float32 [8, 6] as a 2x2 grid of boxes; value = flat index.
  {
    const Shape shape{8, 6};
    const P key{std::string("model"), std::string("w")};
    uint32_t rank = 0;
    for (uint64_t r0 : {0, 4}) {
      for (uint64_t c0 : {0, 3}) {
        Region box = Region::Box({r0, c0}, {4, 3});
        std::vector<float> data;
        for (uint64_t i = r0; i < r0 + 4; ++i) {
          for (uint64_t j = c0; j < c0 + 3; ++j) data.push_back(static_cast<float>(i * 6 + j));
        }
        CKFMT_RETURN_IF_ERROR(w->AddTensorPiece(key, DType::kF32, shape, box, rank, data.data()));
        CKFMT_RETURN_IF_ERROR(w->AddSavedLayout(key, ShardRecord{rank, box}));
        ++rank;
      }
    }
  }
  // model/flat: bfloat16 [5, 7] as four flat ranges (FSDP style).
  {
    const Shape shape{5, 7};
    const P key{std::string("model"), std::string("flat")};
    const uint64_t bounds[] = {0, 9, 18, 27, 35};
    for (uint32_t rank = 0; rank < 4; ++rank) {
      Region flat = Region::Flat(bounds[rank], bounds[rank + 1] - bounds[rank]);
      std::vector<uint16_t> data;
      for (uint64_t i = bounds[rank]; i < bounds[rank + 1]; ++i) {
        data.push_back(ToBF16(static_cast<float>(i) - 17.0f));
      }
      CKFMT_RETURN_IF_ERROR(w->AddTensorPiece(key, DType::kBF16, shape, flat, rank, data.data()));
      CKFMT_RETURN_IF_ERROR(w->AddSavedLayout(key, ShardRecord{rank, flat}));
    }
  }
  // model/uneven: int32 [5, 3] split 3/2/0 rows; rank 2 holds nothing.
  {
    const Shape shape{5, 3};
    const P key{std::string("model"), std::string("uneven")};
    const uint64_t rows[] = {0, 3, 5, 5};
    for (uint32_t rank = 0; rank < 3; ++rank) {
      Region box = Region::Box({rows[rank], 0}, {rows[rank + 1] - rows[rank], 3});
      std::vector<int32_t> data;
      for (uint64_t i = rows[rank] * 3; i < rows[rank + 1] * 3; ++i) {
        data.push_back(-static_cast<int32_t>(i));
      }
      CKFMT_RETURN_IF_ERROR(w->AddTensorPiece(key, DType::kI32, shape, box, rank, data.data()));
    }
  }
  // model/assembled: float32 [4, 4] gathered into one piece; the ranks held
  // flat quarters at save time.
  {
    const Shape shape{4, 4};
    const P key{std::string("model"), std::string("assembled")};
    std::vector<float> data;
    for (int i = 0; i < 16; ++i) data.push_back(0.25f * static_cast<float>(i));
    CKFMT_RETURN_IF_ERROR(
        w->AddTensorPiece(key, DType::kF32, shape, Region::Whole(shape), 0, data.data()));
    for (uint32_t rank = 0; rank < 4; ++rank) {
      CKFMT_RETURN_IF_ERROR(w->AddSavedLayout(key, ShardRecord{rank, Region::Flat(rank * 4, 4)}));
    }
  }
  // optim/state/[0]/exp_avg: float32 [10], partial: ranks 0 and 2 only.
  {
    const P optim{std::string("optim")};
    const P state{std::string("optim"), std::string("state")};
    const P s0{std::string("optim"), std::string("state"), uint64_t{0}};
    CKFMT_RETURN_IF_ERROR(w->AddContainer(optim, EntryKind::kDict));
    CKFMT_RETURN_IF_ERROR(w->AddContainer(state, EntryKind::kList));
    CKFMT_RETURN_IF_ERROR(w->AddContainer(s0, EntryKind::kDict));
    P step = s0;
    step.emplace_back(std::string("step"));
    CKFMT_RETURN_IF_ERROR(w->AddScalar(step, Value(int64_t{1000})));
    P key = s0;
    key.emplace_back(std::string("exp_avg"));
    const Shape shape{10};
    std::vector<float> lo{0.5f, 1.5f, 2.5f}, hi{6.5f, 7.5f, 8.5f, 9.5f};
    CKFMT_RETURN_IF_ERROR(
        w->AddTensorPiece(key, DType::kF32, shape, Region::Flat(0, 3), 0, lo.data()));
    CKFMT_RETURN_IF_ERROR(
        w->AddTensorPiece(key, DType::kF32, shape, Region::Flat(6, 4), 2, hi.data()));
    CKFMT_RETURN_IF_ERROR(w->MarkPartial(key));
  }
  return w->Commit();
}

// Compressible and incompressible data with codec zstd and 4 KiB chunks.
Status WriteZstd(const std::string& path, const IoOptions& io) {
  Arena a;
  std::vector<float> ramp(4096);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i % 16);
  std::vector<uint8_t> noise(6000);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& b : noise) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x >> 56);
  }
  std::vector<double> odd(1000);
  for (size_t i = 0; i < odd.size(); ++i) odd[i] = static_cast<double>(i / 100);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "{\"step\": " + std::to_string(i) + ", \"loss\": 0.5},\n";
  Dict root;
  root.Set("compressible", Value(a.Make<float>(DType::kF32, {4096}, ramp)));
  root.Set("incompressible", Value(a.Make<uint8_t>(DType::kU8, {6000}, noise)));
  root.Set("odd_chunks", Value(a.Make<double>(DType::kF64, {10, 100}, odd)));
  root.Set("log", Value(Bytes{"text", text}));  // log lines, not one JSON document
  SaveOptions o = BaseOptions(io);
  o.codec = Codec::kZstd;
  o.level = 3;
  o.chunk_size = 4096;
  o.metadata = {{"vector", "zstd"}};
  return SaveDict(path, std::move(root), o);
}

// Codec byteplane-zstd on typed data (planes help) and on bytes.
Status WriteBytePlane(const std::string& path, const IoOptions& io) {
  Arena a;
  std::vector<float> ramp(2048);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i % 256) * 0.125f - 16.0f;
  std::vector<uint16_t> weights(3000);
  for (size_t i = 0; i < weights.size(); ++i) {
    weights[i] = ToBF16(static_cast<float>(static_cast<int>(i % 61) - 30) / 64.0f);
  }
  std::vector<int64_t> steps(512);
  for (size_t i = 0; i < steps.size(); ++i) steps[i] = static_cast<int64_t>(i) * 1000 - 7;
  std::string text;
  for (int i = 0; i < 30; ++i) text += "epoch " + std::to_string(i) + " done\n";
  Dict root;
  root.Set("ramp", Value(a.Make<float>(DType::kF32, {32, 64}, ramp)));
  root.Set("weights", Value(a.Make<uint16_t>(DType::kBF16, {3000}, weights)));
  root.Set("steps", Value(a.Make<int64_t>(DType::kI64, {512}, steps)));
  root.Set("log", Value(Bytes{"raw", text}));
  SaveOptions o = BaseOptions(io);
  o.codec = Codec::kBytePlaneZstd;
  o.level = 3;
  o.chunk_size = 4096;
  o.metadata = {{"vector", "byteplane"}};
  return SaveDict(path, std::move(root), o);
}

// Opaque blobs with content types.
Status WriteBytes(const std::string& path, const IoOptions& io) {
  const std::vector<uint8_t> pickled = {
      0x80, 0x04, 0x95, 0x1b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d, 0x94,
      0x28, 0x8c, 0x05, 0x65, 0x70, 0x6f, 0x63, 0x68, 0x94, 0x4b, 0x03, 0x8c, 0x06,
      0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x94, 0x4d, 0xd2, 0x04, 0x75, 0x2e};  // {'epoch': 3, 'offset': 1234}
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  Dict rng;
  rng.Set("python", Value(Bytes{"pickle", std::string(pickled.begin(), pickled.end())}));
  rng.Set("cuda", Value(Bytes{"raw", all}));
  Dict root;
  root.Set("loader_state", Value(Bytes{"pickle", std::string(pickled.begin(), pickled.end())}));
  root.Set("config", Value(Bytes{"json", "{\"lr\": 0.001, \"betas\": [0.9, 0.999]}"}));
  root.Set("empty", Value(Bytes{"raw", ""}));
  root.Set("rng", Value(std::move(rng)));
  SaveOptions o = BaseOptions(io);
  o.metadata = {{"vector", "bytes"}};
  return SaveDict(path, std::move(root), o);
}

}  // namespace

const std::vector<GoldenVector>& GoldenVectors() {
  static const std::vector<GoldenVector> kVectors = {
      {"empty", "no entries, no metadata: the 8192-byte file of spec/FORMAT.md Appendix B.3"},
      {"scalars", "every scalar kind (int extremes, float nan/inf/denormal, bool, string with "
                  "escapes and UTF-8, none), empty dict and list, nested lists, awkward keys"},
      {"dtypes", "a [2, 3] tensor of every dtype with meaningful values; 0-d, zero-size and "
                 "rank-5 shapes"},
      {"sharded", "world size 4: box-grid, flat-range and uneven pieces with saved_layout, an "
                  "assembled tensor with a flat saved_layout, a partial entry"},
      {"zstd", "codec zstd (level 3) with 4 KiB chunks: compressible, incompressible and "
               "multi-chunk tensors and a json blob"},
      {"byteplane", "codec byteplane-zstd (level 3) with 4 KiB chunks: float32, bfloat16 and "
                    "int64 tensors and a raw blob"},
      {"bytes", "bytes blobs with content types pickle, json and raw, including an empty one"},
  };
  return kVectors;
}

IoOptions GoldenIoOptions() {
  IoOptions io;
  io.backend = IoBackend::kPread;
  io.direct_io = false;
  io.threads = 1;
  return io;
}

Status WriteGoldenVector(const std::string& name, const std::string& path, const IoOptions& io) {
  if (name == "empty") return WriteEmpty(path, io);
  if (name == "scalars") return WriteScalars(path, io);
  if (name == "dtypes") return WriteDTypes(path, io);
  if (name == "sharded") return WriteSharded(path, io);
  if (name == "zstd") return WriteZstd(path, io);
  if (name == "byteplane") return WriteBytePlane(path, io);
  if (name == "bytes") return WriteBytes(path, io);
  return Status::InvalidArgument("unknown golden vector \"" + name + "\"");
}

Status WriteGoldenVectors(const std::string& dir) {
  for (const auto& v : GoldenVectors()) {
    const std::string file = v.name + ".ckfmt";
    const std::string path = dir + "/" + file;
    CKFMT_RETURN_IF_ERROR(WriteGoldenVector(v.name, path).WithContext(v.name));
    CKFMT_ASSIGN_OR_RETURN(std::string json, DescribeFileJson(path, file));
    const std::string json_path = dir + "/" + v.name + ".inspect.json";
    std::ofstream out(json_path, std::ios::binary | std::ios::trunc);
    out << json;
    out.close();
    if (!out) return Status::IOError(json_path + ": cannot write");
  }
  return Status::OK();
}

}  // namespace ckfmt::tools
