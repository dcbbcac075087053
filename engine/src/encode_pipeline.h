// Compressed chunks, encoded ahead and placed in order.
//
// A chunk's place in the file follows from the encoded sizes of the chunks
// before it, so encoding in batches and then placing each batch leaves the
// cores idle while the calling thread places and waits for staging. Here
// pool workers start encoding each chunk as soon as it is queued, into a
// ring of scratch buffers, while the calling thread hands finished chunks to
// a sink strictly in queue order (so a file's bytes depend only on its
// input) and, whenever the next chunk in order is not ready, encodes a later
// one itself. Memory is the ring: a few encoded chunks, whatever the
// checkpoint's size. Chunks on a GPU are fetched into host memory by the
// worker that encodes them, so their file is the one their host twins make.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "ckfmt/codec.h"
#include "ckfmt/tensor.h"  // Device
#include "thread_pool.h"

namespace ckfmt {

// One chunk to write: its raw bytes and the piece it belongs to.
struct ChunkJob {
  const uint8_t* src;  // in host memory, or on `device`
  uint64_t size;
  size_t element_size;
  size_t entry, piece;  // IndexRecord::entries[entry].pieces[piece]
  Device device{};
};

// A device chunk's raw bytes, fetched into host memory to be encoded;
// `hold` keeps them there until the chunk has reached the sink.
struct FetchedChunk {
  const uint8_t* data;
  std::shared_ptr<void> hold;
};

// What to store for a chunk. Its checksum is the storer's to compute: a
// sink that copies the bytes into staging hashes them in the same pass,
// while each piece is in cache, instead of reading them from memory twice.
// On 3.2 MiB chunks from memory (BM_PlaceChunkFromMemory, medians of 5):
// 3.90 GiB/s copied and hashed against 2.97 hashed by the encoder and then
// copied, so the cores do less; the thread that places chunks, which
// copied alone at 4.48, is 13% slower, which bounds a save only where many
// encoders feed a disk faster than one core copies.
struct StoredChunk {
  const uint8_t* data;  // the encoded bytes, or the job's source if stored raw
  size_t size;
  Codec codec;  // kNone where encoding did not shrink the chunk
};

// Encodes one chunk as it is to be stored, into `scratch` (`capacity` >=
// MaxEncodedSize(codec, job.size) bytes): with `codec`, except that byte
// planes of 1-byte elements are plain zstd, and that a chunk encoding does
// not shrink is stored raw (the result then points at job.src).
Result<StoredChunk> EncodeForStorage(Codec codec, int level, const ChunkJob& job,
                                     uint8_t* scratch, size_t capacity);

// An order in which to queue `jobs` (indices into it) that spreads every
// element size evenly over the sequence: jobs of one element size keep
// their relative order, and each next job is taken from the element size
// whose bytes have been placed in the smallest share so far (ties: the
// smaller size). Why: encoding costs differ by element size (a bf16 chunk
// has twice the exponent bytes of an fp32 one to entropy-code), and a
// state's tensors come grouped (the bf16 weights, then the fp32 optimizer
// moments), so in queue order the cores are the bottleneck for the one
// group and the disk for the other. Spread out, the load is even (2 GiB
// byte-plane save, 15 alternations: 1.02x its paired raw write against
// 0.97x in queue order).
std::vector<size_t> SpreadElementSizes(const std::vector<ChunkJob>& jobs);

class EncodePipeline {
 public:
  // Called on the thread that calls Push()/Drain(), once per chunk, in
  // queue order; `stored.data` is valid only during the call.
  using Sink = std::function<Status(const ChunkJob&, const StoredChunk& stored)>;
  // Called on any thread for each job on a device, for its raw bytes.
  using Fetch = std::function<Result<FetchedChunk>(const ChunkJob&)>;
  // Called on the thread that calls Push()/Drain() with a chunk's failed
  // fetch or encode; returns the error to report (naming the chunk, say).
  using OnError = std::function<Status(const ChunkJob&, const Status&)>;

  // `ring` >= 1 scratch buffers of MaxEncodedSize(codec, max_chunk) bytes.
  // Without `fetch`, a job on a device fails.
  EncodePipeline(ThreadPool& pool, Codec codec, int level, size_t ring, size_t max_chunk, Sink sink,
                 Fetch fetch = {}, OnError on_error = {});
  ~EncodePipeline();

  // Queues a chunk, first handing finished ones to the sink, and encoding
  // or waiting while the ring is full. The job's source must stay valid
  // until the chunk reaches the sink (Drain() to be sure).
  // On an error (an encode's or the sink's, in queue order) it Cancel()s
  // and returns the error.
  Status Push(const ChunkJob& job);
  // Hands every queued chunk to the sink; on an error as Push().
  Status Drain();
  // Drops the queued chunks and waits for those being encoded: afterwards
  // nothing reads a job's source any more, and no fetched bytes are held.
  void Cancel();

 private:
  struct Slot {
    // Not zeroed: pages are touched by the encoder that first needs them,
    // not by the constructor, while the first writes wait.
    std::unique_ptr<uint8_t[]> scratch;
    ChunkJob job{};
    std::shared_ptr<void> hold;  // fetched bytes the stored chunk may point at
    bool done = false;
    Status error;
    StoredChunk stored{};
  };
  Slot& At(uint64_t seq) { return ring_[seq % ring_.size()]; }
  // Each takes and returns with mu_ held.
  Status Step(std::unique_lock<std::mutex>& lock);   // some progress towards the next sink call
  Status Deliver(std::unique_lock<std::mutex>& lock);  // the oldest chunk to the sink
  bool EncodeNext(std::unique_lock<std::mutex>& lock);  // false: none waiting
  // Returns `s`; on an error first releases the lock and Cancel()s.
  Status CancelOnError(std::unique_lock<std::mutex>& lock, Status s);
  // Fetches (if on a device) and encodes slot.job into the slot.
  Status Encode(Slot& slot) const;

  ThreadPool& pool_;
  const Codec codec_;
  const int level_;
  const Sink sink_;
  const Fetch fetch_;
  const OnError on_error_;
  const size_t capacity_;  // of each scratch buffer
  std::vector<Slot> ring_;
  std::mutex mu_;
  std::condition_variable cv_;  // an encode or a pool task finished
  // Sequence numbers of chunks: delivered_ <= claimed_ <= queued_ <=
  // delivered_ + ring size. [delivered_, claimed_) are being encoded or
  // done, [claimed_, queued_) wait for an encoder.
  uint64_t delivered_ = 0, claimed_ = 0, queued_ = 0;
  size_t encoding_ = 0;  // claimed, not yet done
  size_t tasks_ = 0;     // submitted to the pool, not yet finished
};

}  // namespace ckfmt
