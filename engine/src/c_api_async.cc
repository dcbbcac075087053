// The C ABI's asynchronous saves: an AsyncSaver behind an opaque handle.
#include "c_api_state.h"
#include "ckfmt/async_save.h"
#include "ckfmt/c_api.h"

struct ckfmt_async_saver {
  explicit ckfmt_async_saver(ckfmt::AsyncSaverOptions options) : saver(options) {}
  ckfmt::AsyncSaver saver;
};

using namespace ckfmt;

namespace {

Status RequireSaver(const ckfmt_async_saver* saver) {
  return saver ? Status::OK() : Status::InvalidArgument("saver is NULL");
}

}  // namespace

extern "C" int ckfmt_async_saver_new(const ckfmt_async_options* options, ckfmt_async_saver** out,
                                     char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    if (!out) return Status::InvalidArgument("out is NULL");
    *out = nullptr;
    AsyncSaverOptions ao;
    if (options) {
      ao.wait_if_busy = options->wait_if_busy != 0;
      ao.copy_threads = options->copy_threads;
      ao.snapshot_bytes = options->snapshot_bytes;
    }
    *out = new ckfmt_async_saver(ao);
    return Status::OK();
  });
}

extern "C" void ckfmt_async_saver_free(ckfmt_async_saver* saver) {
  delete saver;  // ~AsyncSaver waits and logs an error; destructors do not throw
}

extern "C" int ckfmt_async_save_entries(ckfmt_async_saver* saver, const char* path,
                                        const ckfmt_entry* entries, size_t n,
                                        const ckfmt_metadata* metadata, size_t n_metadata,
                                        const char* codec, char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    CKFMT_RETURN_IF_ERROR(RequireSaver(saver));
    CKFMT_RETURN_IF_ERROR(RequirePath(path));
    CKFMT_ASSIGN_OR_RETURN(SaveOptions options, SaveOptionsFromAbi(codec, metadata, n_metadata));
    CKFMT_ASSIGN_OR_RETURN(Value sd, EntriesToStateDict(entries, n, kEntryNoun, false));
    return saver->saver.SaveAsync(path, sd, options);
  });
}

extern "C" int ckfmt_async_prepare_entries(ckfmt_async_saver* saver, const ckfmt_entry* entries,
                                           size_t n, char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    CKFMT_RETURN_IF_ERROR(RequireSaver(saver));
    CKFMT_ASSIGN_OR_RETURN(Value sd, EntriesToStateDict(entries, n, kEntryNoun, false));
    return saver->saver.Prepare(sd);
  });
}

extern "C" int ckfmt_async_wait(ckfmt_async_saver* saver, char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    CKFMT_RETURN_IF_ERROR(RequireSaver(saver));
    return saver->saver.Wait().status();
  });
}

extern "C" int ckfmt_async_busy(const ckfmt_async_saver* saver) {
  return saver && saver->saver.busy() ? 1 : 0;
}

extern "C" double ckfmt_async_last_blocked_seconds(const ckfmt_async_saver* saver) {
  return saver ? saver->saver.last_blocked_seconds() : 0.0;
}
