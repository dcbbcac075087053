// CheckpointReader's state, shared by reader.cc and load.cc.
#pragma once

#include <map>

#include "ckfmt/file_layout.h"
#include "ckfmt/reader.h"
#include "io/file.h"
#include "read_plan.h"
#include "thread_pool.h"

namespace ckfmt {

class CheckpointReader::Impl {
 public:
  explicit Impl(const ReadOptions& options)
      : options(options), pool(options.io.threads), session(file, this->options) {}

  Status Open(const std::string& path);
  const EntryRecord* Find(const KeyPath& path) const;

  ReadOptions options;
  ThreadPool pool;
  File file;
  uint64_t file_size = 0;
  FileFooter footer;
  IndexRecord index;
  std::map<KeyPath, size_t> by_path;
  ReadSession session;  // declared after `file` and `options`, which it refers to
};

Result<LoadReport> LoadImpl(CheckpointReader::Impl& reader, Value* state_dict,
                            const LoadOptions& options);

}  // namespace ckfmt
