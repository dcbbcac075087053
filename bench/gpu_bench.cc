// GPU save/load benchmark (built only with CUDA). Measures, in one run:
//   - pinned device->host and host->device copy bandwidth (cudaMemcpyAsync);
//   - raw disk bandwidth of --dir (io_uring, O_DIRECT, 4 MiB blocks, QD 8,
//     write timed to fsync);
//   - Save() of GPU tensors to a file and Load() of it into preallocated GPU
//     tensors (page cache dropped), each as a fraction of the bound
//     min(copy bandwidth, raw disk bandwidth);
//   - the time an AsyncSaver::SaveAsync() of the GPU state blocks the
//     caller, against the pure device->host copy time of the same bytes,
//     and with a snapshot budget of a quarter of the state, against
//     writing three quarters at the run's save rate plus copying the rest;
//   - the parallel DistSave of the same GPU state as one rank (each rank
//     writes its own shards device -> pinned staging slot -> disk; no
//     device communicator), against the same bound;
//   - the flattened DistSave of the same GPU state as one rank without a
//     device communicator (copied to pinned host memory a bucket at a
//     time, gathered and written from host memory), against the same bound;
//   - with NCCL: the flattened DistSave of the same GPU state through a
//     one-rank NCCL communicator (gathered into device buffers, written
//     device -> pinned staging slot -> disk), against the same bound;
//   - a byte-plane Save() of a trained-like state of the same size (bf16
//     weights, fp32 AdamW moments) from the GPU, against the same save of
//     the same state from host memory next to it (logical bytes; the two
//     files must be byte for byte the same).
// Medians over the runs, with min-max.
// Exits 0 with a "no GPU" line when no CUDA device is present.
//
//   ckfmt-bench-gpu [--dir DIR] [--size-mib N] [--runs R] [--device D]
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ckfmt/async_save.h"
#include "ckfmt/cuda.h"
#include "ckfmt/dist/dist_save.h"
#include "ckfmt/reader.h"
#include "ckfmt/writer.h"
#include "measure.h"
#include "realistic_values.h"

#ifdef CKFMT_HAVE_NCCL
#include "ckfmt/dist/nccl_communicator.h"
#endif

namespace {

using ckfmt::bench::DropCache;
using ckfmt::bench::RawIo;

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
double Median(const std::vector<double>& v) { return ckfmt::bench::Series::MedianOf(v); }
// "1.87 (1.80-1.90)": median and range.
std::string Spread(const std::vector<double>& v) {
  char buf[64];
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  std::snprintf(buf, sizeof buf, "%.2f (%.2f-%.2f)", Median(v), *lo, *hi);
  return buf;
}
std::string Rate(const std::vector<double>& v) { return Spread(v) + " GiB/s"; }
// Each run's throughput over that run's bound min(copy, raw disk): the
// disk drifts between runs, so pairs are steadier than medians' ratios.
std::vector<double> Paired(const std::vector<double>& v, const std::vector<double>& raw,
                           double copy) {
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(v[i] / std::min(copy, raw[i]));
  return out;
}
using ckfmt::bench::kGiB;

// Whether two files hold the same bytes, read a piece at a time.
bool SameBytes(const std::string& a, const std::string& b) {
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  std::vector<char> pa(64 << 20), pb(64 << 20);
  while (fa && fb) {
    fa.read(pa.data(), pa.size());
    fb.read(pb.data(), pb.size());
    if (fa.gcount() != fb.gcount() || std::memcmp(pa.data(), pb.data(), fa.gcount()) != 0) {
      return false;
    }
  }
  return fa.eof() && fb.eof();
}

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gpu_bench: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
void Check(const ckfmt::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "gpu_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp";
  uint64_t size_mib = 1024;
  int runs = 3, device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--size-mib") size_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else if (a == "--device") device = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--dir DIR] [--size-mib N] [--runs R] [--device D]\n", argv[0]);
      return 2;
    }
  }
  auto count = ckfmt::CudaDeviceCount();
  if (!count.ok() || *count == 0) {
    std::printf("gpu_bench: no GPU (%s); nothing measured\n",
                count.ok() ? "no CUDA device is present" : count.status().ToString().c_str());
    return 0;
  }
  size_mib = std::max<uint64_t>(64, size_mib / 64 * 64);
  const uint64_t bytes = size_mib << 20;
  const uint64_t tensor_bytes = 64ull << 20;
  const size_t ntensors = bytes / tensor_bytes;
  Check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::printf("device cuda:%d %s; %llu MiB in %zu bf16 tensors; %d runs; dir %s\n", device,
              prop.name, (unsigned long long)size_mib, ntensors, runs, dir.c_str());

  // The state: random bytes (incompressible, like trained weights' mantissas).
  std::vector<uint8_t> host(bytes);
  uint64_t x = 88172645463325252ull;
  for (uint64_t i = 0; i < bytes; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(&host[i], &x, 8);
  }
  ckfmt::Dict gpu_model, back_model;
  auto alloc = ckfmt::CudaAllocator(device);
  for (size_t i = 0; i < ntensors; ++i) {
    ckfmt::Shape shape{tensor_bytes / 2};
    auto t = alloc(ckfmt::DType::kBF16, shape, {}, {});
    auto b = alloc(ckfmt::DType::kBF16, shape, {}, {});
    Check(t.status(), "allocating");
    Check(b.status(), "allocating");
    Check(cudaMemcpy(t->data(), host.data() + i * tensor_bytes, tensor_bytes,
                     cudaMemcpyHostToDevice), "upload");
    gpu_model.Set("w" + std::to_string(i), *t);
    back_model.Set("w" + std::to_string(i), *b);
  }
  ckfmt::Dict root, back_root;
  root.Set("model", gpu_model);
  back_root.Set("model", back_model);
  ckfmt::Value state(root), back(back_root);

  // A trained-like state of the same size for the compressed saves: half
  // bf16 weights, half fp32 AdamW exp_avg, in host memory and on the GPU.
  std::vector<ckfmt::Tensor> realistic_host;
  ckfmt::bench::ParallelFill fill;
  for (size_t i = 0; i < ntensors; ++i) {
    const bool weights = i < ntensors / 2 || ntensors == 1;
    const ckfmt::DType dtype = weights ? ckfmt::DType::kBF16 : ckfmt::DType::kF32;
    const uint64_t n = tensor_bytes / ckfmt::DTypeSize(dtype);
    realistic_host.push_back(ckfmt::Tensor::Empty(dtype, {n}));
    fill.Add(weights ? ckfmt::bench::Realistic::kWeightBF16 : ckfmt::bench::Realistic::kExpAvg,
             realistic_host.back().data(), n, ckfmt::DTypeSize(dtype));
  }
  fill.Run();
  ckfmt::Dict real_host_model, real_gpu_model;
  for (size_t i = 0; i < ntensors; ++i) {
    const ckfmt::Tensor& h = realistic_host[i];
    auto t = alloc(h.dtype(), h.shape(), {}, {});
    Check(t.status(), "allocating");
    Check(cudaMemcpy(t->data(), h.data(), h.nbytes(), cudaMemcpyHostToDevice), "upload");
    real_host_model.Set("w" + std::to_string(i), h);
    real_gpu_model.Set("w" + std::to_string(i), *t);
  }
  ckfmt::Dict real_host_root, real_gpu_root;
  real_host_root.Set("model", real_host_model);
  real_gpu_root.Set("model", real_gpu_model);
  const ckfmt::Value real_host(real_host_root), real_gpu(real_gpu_root);

  // Pinned copy bandwidth, device <-> host, the whole state per copy.
  void* pinned = nullptr;
  Check(cudaHostAlloc(&pinned, tensor_bytes, cudaHostAllocDefault), "cudaHostAlloc");
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  std::vector<double> d2h, h2d;
  for (int r = 0; r < runs; ++r) {
    for (int dir_ = 0; dir_ < 2; ++dir_) {
      auto t = Clock::now();
      for (size_t i = 0; i < ntensors; ++i) {
        void* dev = gpu_model.value(i).as_tensor().data();
        Check(dir_ == 0 ? cudaMemcpyAsync(pinned, dev, tensor_bytes, cudaMemcpyDeviceToHost, stream)
                        : cudaMemcpyAsync(dev, pinned, tensor_bytes, cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync");
      }
      Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      (dir_ == 0 ? d2h : h2d).push_back(bytes / kGiB / Since(t));
    }
    // The H2D runs above wrote the pinned bytes into the tensors: restore.
    for (size_t i = 0; i < ntensors; ++i) {
      Check(cudaMemcpy(gpu_model.value(i).as_tensor().data(), host.data() + i * tensor_bytes,
                       tensor_bytes, cudaMemcpyHostToDevice), "upload");
    }
  }
  cudaFreeHost(pinned);
  cudaStreamDestroy(stream);

  const std::string raw_path = dir + "/gpu_bench.raw";
  const std::string path = dir + "/gpu_bench.ckfmt";
  std::vector<double> raw_w, raw_r, save, load, blocked, blocked_ratio, dist_save, parallel_save;
  std::vector<double> host_dist_save, bp_gpu, bp_host, bp_ratio;
  const std::string host_path = dir + "/gpu_bench.host.ckfmt";
  std::vector<double> budget_blocked, budget_ratio;
  RawIo rawio;
  ckfmt::dist::SingleCommunicator bootstrap;
#ifdef CKFMT_HAVE_NCCL
  auto nccl = ckfmt::dist::MakeNcclCommunicator(bootstrap, device);
  Check(nccl.status(), "MakeNcclCommunicator");
#endif
  const double d2h_s = bytes / kGiB / Median(d2h);
  for (int r = 0; r < runs; ++r) {
    raw_w.push_back(bytes / kGiB / ckfmt::bench::RawTransfer(raw_path, bytes, true, rawio));
    DropCache(raw_path);
    raw_r.push_back(bytes / kGiB / ckfmt::bench::RawTransfer(raw_path, bytes, false, rawio));
    ::unlink(raw_path.c_str());

    ::unlink(path.c_str());
    auto t = Clock::now();
    auto stats = ckfmt::Save(path, state);
    Check(stats.status(), "Save");
    save.push_back(bytes / kGiB / Since(t));
    DropCache(path);
    t = Clock::now();
    auto report = ckfmt::Load(path, &back);
    Check(report.status(), "Load");
    load.push_back(bytes / kGiB / Since(t));

#ifdef CKFMT_HAVE_NCCL
    ::unlink(path.c_str());
    ckfmt::dist::DistSaveOptions dist_options;
    dist_options.device_comm = nccl->get();
    t = Clock::now();
    Check(ckfmt::dist::DistSave(bootstrap, path, state, dist_options).status(), "DistSave");
    dist_save.push_back(bytes / kGiB / Since(t));
#endif
    ::unlink(path.c_str());
    t = Clock::now();
    Check(ckfmt::dist::DistSave(bootstrap, path, state).status(), "DistSave through host memory");
    host_dist_save.push_back(bytes / kGiB / Since(t));
    ::unlink(path.c_str());
    ckfmt::dist::DistSaveOptions parallel_options;
    parallel_options.mode = ckfmt::dist::SaveMode::kParallel;
    t = Clock::now();
    Check(ckfmt::dist::DistSave(bootstrap, path, state, parallel_options).status(),
          "parallel DistSave");
    parallel_save.push_back(bytes / kGiB / Since(t));

    // Byte-plane saves of the trained-like state, from the GPU and from host
    // memory, one after the other: the same work but for the D2H copies.
    ckfmt::SaveOptions bp;
    bp.codec = ckfmt::Codec::kBytePlaneZstd;
    ::unlink(path.c_str());
    t = Clock::now();
    Check(ckfmt::Save(path, real_gpu, bp).status(), "byte-plane Save from the GPU");
    bp_gpu.push_back(bytes / kGiB / Since(t));
    ::unlink(host_path.c_str());
    t = Clock::now();
    Check(ckfmt::Save(host_path, real_host, bp).status(), "byte-plane Save from host memory");
    bp_host.push_back(bytes / kGiB / Since(t));
    bp_ratio.push_back(bp_gpu.back() / bp_host.back());
    if (!SameBytes(path, host_path)) {
      std::fprintf(stderr, "gpu_bench: the byte-plane files from the GPU and the host differ\n");
      return 1;
    }
    ::unlink(host_path.c_str());

    ckfmt::AsyncSaver saver;
    for (int k = 0; k < 2; ++k) {  // the second save reuses the pinned arena
      ::unlink(path.c_str());
      Check(saver.SaveAsync(path, state), "SaveAsync");
      double b = saver.last_blocked_seconds();
      Check(saver.Wait().status(), "async save");
      if (k == 1) {
        blocked.push_back(b);
        blocked_ratio.push_back(b / d2h_s);
      }
    }
    // A snapshot budget of a quarter of the state: three quarters are
    // written before the call returns. Against this run's save rate for
    // those and the D2H copy for the rest.
    ckfmt::AsyncSaverOptions budget_options;
    budget_options.snapshot_bytes = bytes / 4;
    ckfmt::AsyncSaver budget_saver(budget_options);
    for (int k = 0; k < 2; ++k) {
      ::unlink(path.c_str());
      Check(budget_saver.SaveAsync(path, state), "SaveAsync within a budget");
      double b = budget_saver.last_blocked_seconds();
      Check(budget_saver.Wait().status(), "async save within a budget");
      if (k == 1) {
        const double expect = 0.75 * bytes / kGiB / save.back() + 0.25 * d2h_s;
        budget_blocked.push_back(b);
        budget_ratio.push_back(b / expect);
      }
    }
  }
  ::unlink(path.c_str());
  // The loaded tensors hold the saved bytes.
  std::vector<uint8_t> check(tensor_bytes);
  for (size_t i = 0; i < ntensors; ++i) {
    Check(cudaMemcpy(check.data(), back_model.value(i).as_tensor().data(), tensor_bytes,
                     cudaMemcpyDeviceToHost), "download");
    if (std::memcmp(check.data(), host.data() + i * tensor_bytes, tensor_bytes) != 0) {
      std::fprintf(stderr, "gpu_bench: loaded tensor w%zu differs from the saved one\n", i);
      return 1;
    }
  }

  const double bound_save = std::min(Median(d2h), Median(raw_w));
  const double bound_load = std::min(Median(h2d), Median(raw_r));
  std::printf("pinned copy  D2H %.2f GiB/s  H2D %.2f GiB/s\n", Median(d2h), Median(h2d));
  std::printf("raw disk     write %s (to fsync)  read %s\n", Rate(raw_w).c_str(),
              Rate(raw_r).c_str());
  std::printf("save GPU->file %s = %.2f of min(D2H, raw write); paired %s\n",
              Rate(save).c_str(), Median(save) / bound_save,
              Spread(Paired(save, raw_w, Median(d2h))).c_str());
  std::printf("load file->GPU %s = %.2f of min(H2D, raw read); paired %s\n",
              Rate(load).c_str(), Median(load) / bound_load,
              Spread(Paired(load, raw_r, Median(h2d))).c_str());
  if (!dist_save.empty()) {
    std::printf("DistSave GPU->file over NCCL (1 rank, flattened) %s = %.2f of min(D2H, raw "
                "write); paired %s\n",
                Rate(dist_save).c_str(), Median(dist_save) / bound_save,
                Spread(Paired(dist_save, raw_w, Median(d2h))).c_str());
  }
  std::printf("DistSave GPU->host memory->file (1 rank, flattened, no device communicator) %s = "
              "%.2f of min(D2H, raw write); paired %s\n",
              Rate(host_dist_save).c_str(), Median(host_dist_save) / bound_save,
              Spread(Paired(host_dist_save, raw_w, Median(d2h))).c_str());
  std::printf("DistSave GPU->file, parallel (1 rank) %s = %.2f of min(D2H, raw write); paired %s\n",
              Rate(parallel_save).c_str(), Median(parallel_save) / bound_save,
              Spread(Paired(parallel_save, raw_w, Median(d2h))).c_str());
  std::printf("byte-plane save of a trained-like state, GPU->file %s, host->file %s (logical "
              "bytes); GPU / host, paired %s; the files byte for byte the same\n",
              Rate(bp_gpu).c_str(), Rate(bp_host).c_str(), Spread(bp_ratio).c_str());
  std::printf("async save blocked %.3f s = %.2fx the pure D2H copy time (%.3f s)\n",
              Median(blocked), Median(blocked_ratio), d2h_s);
  std::printf("async save within a snapshot budget of 1/4 of the state: blocked %.3f s = %sx "
              "(3/4 written at the run's save rate + 1/4 copied D2H)\n",
              Median(budget_blocked), Spread(budget_ratio).c_str());
  return 0;
}
