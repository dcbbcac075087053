// Per-thread zstd contexts: creating one per chunk costs more than coding a
// small chunk. Freed when the thread exits.
#pragma once

#include <zstd.h>

#include <memory>

namespace ckfmt {

inline ZSTD_CCtx* ThreadCompressContext() {
  struct Free {
    void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
  };
  thread_local std::unique_ptr<ZSTD_CCtx, Free> ctx(ZSTD_createCCtx());
  return ctx.get();
}

inline ZSTD_DCtx* ThreadDecompressContext() {
  struct Free {
    void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
  };
  thread_local std::unique_ptr<ZSTD_DCtx, Free> ctx(ZSTD_createDCtx());
  return ctx.get();
}

}  // namespace ckfmt
