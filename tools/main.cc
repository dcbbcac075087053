// ckfmt: inspect and verify ckfmt checkpoint files.
//
// Exit codes: 0 success, 1 a file is invalid or corrupt, 2 usage error or
// a file that could not be opened or read.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "ckfmt/file_layout.h"
#include "exit_codes.h"
#include "inspect.h"
#include "verify_cmd.h"

using namespace ckfmt::tools;

int main(int argc, char** argv) {
  CLI::App app{"ckfmt: inspect and verify ckfmt checkpoint files.\n"
               "Exit codes: 0 success, 1 invalid or corrupt file, 2 usage or I/O error."};
  app.name("ckfmt");
  app.set_version_flag("--version", std::string("ckfmt ") + CKFMT_VERSION + " (format " +
                                        std::to_string(ckfmt::kMajorVersion) + "." +
                                        std::to_string(ckfmt::kMinorVersion) + ")");
  app.require_subcommand(1);

  InspectOptions inspect;
  CLI::App* inspect_cmd = app.add_subcommand(
      "inspect", "List a checkpoint's metadata and entries (validates the index first).");
  inspect_cmd->add_option("FILE", inspect.file, "Checkpoint file")->required();
  inspect_cmd->add_flag("--json", inspect.json,
                        "Print JSON (format: spec/INSPECT_JSON.md) instead of text");
  inspect_cmd->add_option("--prefix", inspect.prefix,
                          "Only entries at or below KEYPATH (e.g. model/layers/[0])")
      ->type_name("KEYPATH");

  VerifyCmdOptions verify;
  CLI::App* verify_cmd = app.add_subcommand(
      "verify", "Check every byte of checkpoint files: header, index, chunk checksums, padding.");
  verify_cmd->add_option("FILE", verify.files, "Checkpoint files")->required();
  CLI::Option* json = verify_cmd->add_flag("--json", verify.json,
                                           "Print a JSON report (format: spec/INSPECT_JSON.md)");
  CLI::Option* quiet =
      verify_cmd->add_flag("-q,--quiet", verify.quiet, "Print nothing; only the exit code tells");
  CLI::Option* verbose = verify_cmd->add_flag("-v,--verbose", verify.verbose,
                                              "Also print a line for each valid file");
  quiet->excludes(verbose);
  quiet->excludes(json);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, version or the error
    return code == 0 ? kExitOk : kExitError;
  }

  if (*inspect_cmd) return RunInspect(inspect, std::cout, std::cerr);
  if (*verify_cmd) return RunVerify(verify, std::cout, std::cerr);
  return kExitError;
}
