#include "sim_device_comm.h"

#include <numeric>

namespace ckfmt_dist_test {

using namespace ckfmt;
using namespace ckfmt::dist;

std::vector<uint8_t> SimulatedDeviceComm::Down(const void* device, size_t n) {
  std::vector<uint8_t> host(n);
  if (n) ops_.Download(host.data(), device, n);
  return host;
}

void SimulatedDeviceComm::Up(void* device, const std::vector<uint8_t>& host, size_t offset,
                             size_t n) {
  if (n) ops_.Upload(device, host.data() + offset, n);
}

Status SimulatedDeviceComm::Broadcast(void* data, size_t bytes, int root) {
  std::vector<uint8_t> h = Down(data, bytes);
  CKFMT_RETURN_IF_ERROR(host_.Broadcast(h.data(), bytes, root));
  Up(data, h, 0, bytes);
  return Status::OK();
}

Status SimulatedDeviceComm::AllGather(const void* send, size_t bytes, void* recv) {
  std::vector<uint8_t> h = Down(send, bytes), all(bytes * size());
  CKFMT_RETURN_IF_ERROR(host_.AllGather(h.data(), bytes, all.data()));
  Up(recv, all, 0, all.size());
  return Status::OK();
}

Status SimulatedDeviceComm::AllGatherV(const void* send, size_t bytes, void* recv,
                                       const std::vector<uint64_t>& counts) {
  std::vector<uint8_t> h = Down(send, bytes);
  std::vector<uint8_t> all(std::accumulate(counts.begin(), counts.end(), uint64_t{0}));
  CKFMT_RETURN_IF_ERROR(host_.AllGatherV(h.data(), bytes, all.data(), counts));
  Up(recv, all, 0, all.size());
  return Status::OK();
}

Status SimulatedDeviceComm::Gather(const void* send, size_t bytes, void* recv, int root) {
  std::vector<uint8_t> h = Down(send, bytes), all(rank() == root ? bytes * size() : 0);
  CKFMT_RETURN_IF_ERROR(host_.Gather(h.data(), bytes, all.data(), root));
  if (rank() == root) Up(recv, all, 0, all.size());
  return Status::OK();
}

Status SimulatedDeviceComm::GatherV(const void* send, size_t bytes, void* recv,
                                    const std::vector<uint64_t>& counts, int root) {
  std::vector<uint8_t> h = Down(send, bytes);
  std::vector<uint8_t> all(std::accumulate(counts.begin(), counts.end(), uint64_t{0}));
  CKFMT_RETURN_IF_ERROR(host_.GatherV(h.data(), bytes, all.data(), counts, root));
  if (rank() == root) Up(recv, all, 0, all.size());
  return Status::OK();
}

Status SimulatedDeviceComm::GatherSegments(const std::vector<ConstSegment>& send,
                                           const std::vector<std::vector<Segment>>& recv,
                                           int root) {
  std::vector<uint8_t> stream;
  for (const ConstSegment& s : send) {
    std::vector<uint8_t> h = Down(s.data, s.size);
    stream.insert(stream.end(), h.begin(), h.end());
  }
  gathered_ += stream.size();
  // On root: each rank's stream into one host buffer, then scattered.
  std::vector<std::vector<uint8_t>> staged(recv.size());
  std::vector<std::vector<Segment>> host_recv(recv.size());
  for (size_t r = 0; r < recv.size(); ++r) {
    staged[r].resize(SegmentBytes(recv[r]));
    host_recv[r] = {{staged[r].data(), staged[r].size()}};
  }
  CKFMT_RETURN_IF_ERROR(host_.GatherSegments({{stream.data(), stream.size()}}, host_recv, root));
  for (size_t r = 0; r < recv.size(); ++r) {
    size_t off = 0;
    for (const Segment& d : recv[r]) {
      Up(d.data, staged[r], off, d.size);
      off += d.size;
    }
  }
  return Status::OK();
}

Status SimulatedDeviceComm::Send(const void* data, size_t bytes, int dst, int tag) {
  std::vector<uint8_t> h = Down(data, bytes);
  return host_.Send(h.data(), bytes, dst, tag);
}

Status SimulatedDeviceComm::Recv(void* data, size_t bytes, int src, int tag) {
  std::vector<uint8_t> h(bytes);
  CKFMT_RETURN_IF_ERROR(host_.Recv(h.data(), bytes, src, tag));
  Up(data, h, 0, bytes);
  return Status::OK();
}

}  // namespace ckfmt_dist_test
