// Replacing a file so that its name never shows a partial one: write a
// temporary beside it, make it durable, then rename it over the name. A
// crash or an error at any moment leaves the old file, or the new one,
// whole. The engine's writers save this way; tools that write other
// formats (ckfmt convert) use the same steps. Before creating its own
// temporary, a save removes those of killed saves of the same name.
#pragma once

#include <cstdint>
#include <string>

#include "ckfmt/status.h"

namespace ckfmt {

// "<path>.tmp.<16 hex digits>", random, in the same directory (so that the
// rename stays within one file system).
std::string TemporaryPathFor(const std::string& path);

// Fails with kInvalidArgument if `path` names a directory, which
// CommitRename could not replace: a save checks before writing, not after.
Status CheckCommitTarget(const std::string& path);

// What a save does before it writes: CheckCommitTarget(path); refuses a
// `path` whose directory does not exist (kNotFound) or is not a directory
// (kInvalidArgument), naming `path` rather than the temporary; then removes
// the temporaries of `path` (TemporaryPathFor's names) that no live save
// holds and that nothing has written for kStaleTemporarySeconds - what
// saves killed before their commit left behind, which would otherwise fill
// the disk one interrupted save at a time (each removal is logged as a
// warning; a file system without flock keeps them all). Returns the name
// for this save's temporary: the caller creates it (O_EXCL) and calls
// HoldTemporary on it at once.
inline constexpr int kStaleTemporarySeconds = 60;
Result<std::string> PrepareTemporary(const std::string& path);

// The temporaries of `path` that PrepareTemporary removes: files, and
// directories (as `ckfmt convert --to dcp` writes) with all they hold.
void RemoveStaleTemporaries(const std::string& path);

// Marks the temporary open at `fd` as a live save's: an exclusive flock,
// which lasts until its last descriptor closes (or the process dies), so
// that later saves' PrepareTemporary leaves it alone.
void HoldTemporary(int fd);

// rename(from, to), then an fsync of the directory holding `to` if
// `sync_dir`. REQUIRES: `from` is durable already (fsynced) if the result
// must survive a crash. A large file that `to` named before is freed on a
// background thread after the rename, not inside it.
Status CommitRename(const std::string& from, const std::string& to, bool sync_dir);

// Swaps the names `from` and `to` (both must exist; directories, as a way
// to replace a non-empty one, which rename(2) refuses), then fsyncs the
// directory holding `to` if `sync_dir`. Afterwards `to` names what `from`
// named and `from` the old `to`, for the caller to remove. Atomic where
// the file system exchanges names (renameat2 RENAME_EXCHANGE: ext4, xfs,
// btrfs, tmpfs); elsewhere the old `to` is renamed aside first, so that a
// crash in between leaves it under a TemporaryPathFor name, never lost.
// REQUIRES: `from` is durable already if the result must survive a crash.
Status CommitExchange(const std::string& from, const std::string& to, bool sync_dir);

}  // namespace ckfmt
