#include "ckfmt/reader.h"

#include "ckfmt/checksum.h"
#include "ckfmt/host_memory.h"
#include "reader_impl.h"

namespace ckfmt {

Status CheckpointReader::Impl::Open(const std::string& path) {
  CKFMT_ASSIGN_OR_RETURN(file, File::OpenRead(path, options.io.direct_io));
  CKFMT_ASSIGN_OR_RETURN(file_size, file.Size());
  CKFMT_RETURN_IF_ERROR(CheckFileSize(file_size, path));
  AlignedBuffer block(kAlignment);
  CKFMT_RETURN_IF_ERROR(file.ReadAt(0, block.data(), kAlignment));
  CKFMT_ASSIGN_OR_RETURN(FileHeader header, DecodeHeader(block.data(), path));
  CKFMT_RETURN_IF_ERROR(file.ReadAt(file_size - kAlignment, block.data(), kAlignment));
  CKFMT_ASSIGN_OR_RETURN(footer,
                         DecodeFooter(block.data() + kAlignment - kFooterSize, file_size, path));
  CKFMT_RETURN_IF_ERROR(CheckVersionsAgree(header, footer, path));
  AlignedBuffer raw(AlignUp(footer.index_length));
  CKFMT_RETURN_IF_ERROR(file.ReadAt(footer.index_offset, raw.data(), AlignUp(footer.index_length)));
  CKFMT_RETURN_IF_ERROR(CheckIndexChecksum(raw.data(), footer, path));
  CKFMT_ASSIGN_OR_RETURN(index, ParseIndex(raw.data(), footer.index_length, kHeaderSize,
                                           footer.index_offset, path));
  for (size_t i = 0; i < index.entries.size(); ++i) by_path.emplace(index.entries[i].path, i);
  return Status::OK();
}

const EntryRecord* CheckpointReader::Impl::Find(const KeyPath& path) const {
  auto it = by_path.find(path);
  return it == by_path.end() ? nullptr : &index.entries[it->second];
}

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::~CheckpointReader() = default;

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& path,
                                                                 const ReadOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  CKFMT_RETURN_IF_ERROR(impl->Open(path));
  return std::unique_ptr<CheckpointReader>(new CheckpointReader(std::move(impl)));
}

const std::string& CheckpointReader::path() const { return impl_->file.path(); }
const IndexRecord& CheckpointReader::index() const { return impl_->index; }
uint64_t CheckpointReader::file_size() const { return impl_->file_size; }
const FileFooter& CheckpointReader::footer() const { return impl_->footer; }
const EntryRecord* CheckpointReader::Find(const KeyPath& path) const { return impl_->Find(path); }

Status CheckpointReader::ReadRegion(const KeyPath& path, const Region& region, void* dst,
                                    Device device) {
  const EntryRecord* e = impl_->Find(path);
  if (!e) return Status::NotFound(this->path() + ": no entry " + FormatKeyPath(path));
  if (!e->HasData()) {
    return Status::Mismatch(this->path() + ": " + FormatKeyPath(path) + " is a " +
                            std::string(EntryKindName(e->kind)) + ", not a tensor");
  }
  if (Status s = ValidateRegion(region, e->shape); !s.ok()) {
    return Status::InvalidArgument(this->path() + ": " + FormatKeyPath(path) + ": " + s.message());
  }
  uint64_t bytes = 0;
  uint64_t direct = 0;
  return impl_->session.Read({{e, region, static_cast<uint8_t*>(dst), device}}, impl_->pool, &bytes,
                             &direct);
}

Result<Tensor> CheckpointReader::ReadTensor(const KeyPath& path, const Allocator& allocator) {
  const EntryRecord* e = impl_->Find(path);
  if (!e) return Status::NotFound(this->path() + ": no entry " + FormatKeyPath(path));
  if (!e->HasData()) {
    return Status::Mismatch(this->path() + ": " + FormatKeyPath(path) + " is a " +
                            std::string(EntryKindName(e->kind)) + ", not a tensor");
  }
  Allocator alloc = allocator;
  if (!alloc) {
    // The size comes from the file: refuse what no machine of this size
    // holds before allocating it (see host_memory.h).
    HostMemoryNeed need;
    need.Add(path, e->ByteSize());
    CKFMT_RETURN_IF_ERROR(need.Check(this->path()));
    alloc = HostAllocator();
  }
  auto allocated = alloc(e->dtype, e->shape, path, Device{});
  if (!allocated.ok()) {
    return allocated.status().WithContext(this->path() + ": allocating " + FormatKeyPath(path));
  }
  Tensor t = std::move(*allocated);
  CKFMT_RETURN_IF_ERROR(ReadRegion(path, Region::Whole(e->shape), t.data(), t.device()));
  return t;
}

Result<LoadReport> CheckpointReader::Load(Value* state_dict, const LoadOptions& options) {
  return LoadImpl(*impl_, state_dict, options);
}

Result<LoadReport> Load(const std::string& path, Value* state_dict, const LoadOptions& options,
                        const ReadOptions& read_options) {
  CKFMT_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(path, read_options));
  return reader->Load(state_dict, options);
}

}  // namespace ckfmt
