// ckfmt-make-vectors OUTDIR: writes the golden vectors (NAME.ckfmt and
// NAME.inspect.json) into OUTDIR, and the invalid vectors into
// OUTDIR/invalid. Regenerate spec/vectors with
//   build/tools/ckfmt-make-vectors spec/vectors
// and review the diff: any change there is a change of the on-disk format
// or of the writer's output.
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "invalid_vectors.h"
#include "vectors.h"

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(stderr, "usage: ckfmt-make-vectors OUTDIR\n");
    return argc == 2 ? 0 : 2;
  }
  const std::string dir = argv[1];
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "ckfmt-make-vectors: %s is not a directory\n", dir.c_str());
    return 2;
  }
  const std::string invalid_dir = dir + "/invalid";
  ::mkdir(invalid_dir.c_str(), 0755);  // may exist
  ckfmt::Status s = ckfmt::tools::WriteGoldenVectors(dir);
  if (s.ok()) s = ckfmt::tools::WriteInvalidVectors(invalid_dir);
  if (!s.ok()) {
    std::fprintf(stderr, "ckfmt-make-vectors: %s\n", s.ToString().c_str());
    return 1;
  }
  for (const auto& v : ckfmt::tools::GoldenVectors()) {
    std::printf("%s/%s.ckfmt\n%s/%s.inspect.json\n", dir.c_str(), v.name.c_str(), dir.c_str(),
                v.name.c_str());
  }
  std::printf("%s/: base.ckfmt, invalid.json and %zu invalid vectors\n", invalid_dir.c_str(),
              ckfmt::tools::InvalidVectors().size());
  return 0;
}
