// Asynchronous save: the trainer is blocked only while its state is copied
// into a snapshot; the write to disk runs on a background thread.
//
// The snapshot arena is kept between saves (and pre-faulted when it grows),
// so steady-state blocked time is one parallel memcpy of the state (of the
// part that fits AsyncSaverOptions::snapshot_bytes, plus the write of the
// rest). CUDA
// tensors (see cuda.h) are copied device -> arena, which is then kept
// pinned: the caller is blocked for about the device-to-host copy time,
// during which the host tensors are copied too.
// Failures of a background save never leave a partial file at the final
// name (the commit protocol of writer.h) and surface at the next call to
// SaveAsync() or Wait().
//
// Threads: an AsyncSaver's calls come from one thread at a time; its write
// runs on a thread of its own, beside any other readers and writers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ckfmt/writer.h"

namespace ckfmt {

struct AsyncSaverOptions {
  // What SaveAsync does while an earlier save is still writing: wait for it
  // (true) or fail at once with kAborted (false).
  bool wait_if_busy = true;
  unsigned copy_threads = 0;  // 0: all cores
  // Most bytes of snapshot memory (0: no limit). When the state's tensors
  // need more, SaveAsync writes the leading entries to disk straight from
  // the caller's tensors (GPU ones device -> pinned staging slot -> disk)
  // and snapshots only the trailing tensors that fit: it returns as soon
  // as what is left to write fits in the snapshot.
  uint64_t snapshot_bytes = 0;
};

class AsyncSaver {
 public:
  explicit AsyncSaver(AsyncSaverOptions options = {});
  ~AsyncSaver();  // waits for an in-flight save; its error is logged

  // Snapshots `state_dict` (REQUIRES: a dict of tensors and objects; CUDA
  // tensors need a build with CUDA) and starts writing it to `path`.
  // Returns once the snapshot is taken, device copies included: the caller
  // may then modify its tensors (REQUIRES: work the caller enqueued on its
  // own CUDA streams that writes them has completed before the call). If the previous background
  // save failed, returns that error (and starts nothing). A `path` that
  // names a directory is refused at once, before the snapshot.
  Status SaveAsync(const std::string& path, const Value& state_dict,
                   const SaveOptions& options = {});

  // Sets up the snapshot memory that SaveAsync(state_dict) will use (and
  // pins it, for CUDA tensors), so that the first snapshot is a copy only.
  // Fresh memory is slow to fault in: 2 GiB took 1.3-4.5 s on a VM where
  // the copy itself takes 0.1 s. Call it at start-up, outside the training
  // loop; optional. Waits for an in-flight save first (whose result stays
  // for SaveAsync() or Wait()). REQUIRES: as SaveAsync().
  Status Prepare(const Value& state_dict);

  // Waits for the in-flight save (if any) and returns its result; with
  // nothing in flight, returns the last save's result or an error saying
  // nothing was saved.
  Result<WriteStats> Wait();

  bool busy() const;
  // Seconds the last SaveAsync() blocked its caller (snapshot copy).
  double last_blocked_seconds() const;
  // Bytes of snapshot memory held for the next save (kept between saves).
  uint64_t reserved_bytes() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ckfmt
