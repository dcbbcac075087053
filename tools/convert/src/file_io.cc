#include "file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "ckfmt/commit.h"

namespace ckfmt::convert {

Result<std::shared_ptr<InputFile>> InputFile::Open(const std::string& path) {
  CKFMT_ASSIGN_OR_RETURN(File file, File::OpenRead(path, /*direct=*/false));
  CKFMT_ASSIGN_OR_RETURN(uint64_t size, file.Size());
  return std::shared_ptr<InputFile>(
      new InputFile(std::make_shared<const File>(std::move(file)), size));
}

Result<std::shared_ptr<InputFile>> InputFile::WithRegionInMemory(std::shared_ptr<InputFile> file,
                                                                 uint64_t offset, uint64_t length,
                                                                 const std::string& what) {
  std::shared_ptr<InputFile> f(new InputFile(file->file_, file->size_));
  f->region_.resize(length);
  CKFMT_RETURN_IF_ERROR(file->ReadAt(offset, f->region_.data(), length, what));
  f->region_offset_ = offset;
  return f;
}

Status InputFile::ReadAt(uint64_t offset, void* dst, uint64_t n, const std::string& what) const {
  if (offset > size_ || n > size_ - offset) {
    return Status::Corruption(path() + ": " + what + ": needs bytes [" + std::to_string(offset) +
                              ", " + std::to_string(offset + n) + ") but the file has " +
                              std::to_string(size_) + " bytes (truncated?)");
  }
  if (offset >= region_offset_ && offset - region_offset_ <= region_.size() &&
      n <= region_.size() - (offset - region_offset_)) {
    if (n) std::memcpy(dst, region_.data() + (offset - region_offset_), n);
    return Status::OK();
  }
  return file_->ReadAt(offset, dst, n).WithContext(what);
}

Result<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path) {
  CKFMT_ASSIGN_OR_RETURN(std::string tmp, PrepareTemporary(path));
  CKFMT_ASSIGN_OR_RETURN(File file, File::Create(tmp, /*direct=*/false));
  HoldTemporary(file.fd());
  return std::unique_ptr<OutputFile>(new OutputFile(path, tmp, std::move(file)));
}

OutputFile::~OutputFile() {
  if (!done_) {
    (void)file_.Close();
    ::unlink(tmp_.c_str());
  }
}

Status OutputFile::WriteAt(uint64_t offset, const void* data, uint64_t n) {
  return file_.WriteAt(offset, data, n);
}

Status OutputFile::ReadAt(uint64_t offset, void* dst, uint64_t n) const {
  return file_.ReadAt(offset, dst, n);
}

Status OutputFile::Commit(bool fsync) {
  if (fsync) CKFMT_RETURN_IF_ERROR(file_.Sync());
  CKFMT_RETURN_IF_ERROR(file_.Close());
  CKFMT_RETURN_IF_ERROR(CommitRename(tmp_, path_, fsync));
  done_ = true;
  return Status::OK();
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string DirName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t s = p.rfind('/');
  if (s == std::string::npos) return ".";
  if (s == 0) return "/";
  return p.substr(0, s);
}

}  // namespace ckfmt::convert
