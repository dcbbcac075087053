// ckfmt: inspect, verify and convert checkpoint files.
//
// Exit codes: 0 success, 1 a file is invalid or corrupt, 2 usage error or
// a file that could not be opened or read.
#include <iostream>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "ckfmt/file_layout.h"
#include "convert_cmd.h"
#include "exit_codes.h"
#include "inspect.h"
#include "verify_cmd.h"

using namespace ckfmt::tools;

namespace {

// A switch that turns `setting` off. Not CLI11's negated flag ("!--no-x"),
// whose help reads "--no-x{false}", as if "{false}" were to be typed.
void AddOffSwitch(CLI::App* cmd, const std::string& name, bool& setting, const std::string& what) {
  cmd->add_flag_callback(
      name, [&setting] { setting = false; }, what);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckfmt: inspect, verify and convert checkpoint files.\n"
               "Exit codes: 0 success, 1 invalid or corrupt file, 2 usage or I/O error, 3 (convert) "
               "a valid input that cannot be converted."};
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
  verify_cmd->add_flag("--checksums-only", verify.checksums_only,
                       "Do not decode compressed chunks: still finds any byte changed since the "
                       "file was written, at the disk's speed, but not a chunk a faulty writer "
                       "stored undecodable");
  quiet->excludes(verbose);
  quiet->excludes(json);

  ConvertCmdOptions conv;
  CLI::App* convert_cmd = app.add_subcommand(
      "convert",
      "Convert torch.save (.pt/.pth/.bin), DCP directories and safetensors to ckfmt, and ckfmt "
      "to safetensors, torch.save or a DCP directory. Sources are recognised by content; the "
      "output format follows DST's extension or --to (needed for DCP). Pickle is never "
      "executed.");
  convert_cmd->add_option("SRC", conv.convert.src, "Source file or directory")->required();
  convert_cmd->add_option("DST", conv.convert.dst, "Destination file (DCP: directory)")->required();
  convert_cmd->add_option("--to", conv.to, "Output format: ckfmt, safetensors, torch or dcp");
  convert_cmd->add_flag("--allow-opaque-pickle", conv.convert.allow_opaque_pickle,
                        "Carry objects with unknown pickle globals as opaque \"pickle\" bytes "
                        "(never executed) instead of refusing the file");
  AddOffSwitch(convert_cmd, "--no-sharding-metadata", conv.convert.keep_sharding_metadata,
               "DCP: do not record each chunk's original place as saved layout");
  AddOffSwitch(convert_cmd, "--no-split-keys", conv.convert.split_dotted_keys,
               "Keep dotted keys (a.b.c) as one key instead of nested dicts");
  convert_cmd->add_option("--budget-mib", conv.budget_mib,
                          "Tensor bytes held in memory at once (default 256)");
  AddOffSwitch(convert_cmd, "--no-crc", conv.convert.verify_zip_crc,
               "Skip the CRC-32 check of zip records");
  AddOffSwitch(convert_cmd, "--no-fsync", conv.convert.fsync,
               "Do not fsync the output (faster; not crash-safe)");
  convert_cmd->add_flag("-q,--quiet", conv.quiet, "Print nothing on success");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, version or the error
    return code == 0 ? kExitOk : kExitError;
  }

  // The library reports failures as Status; this is the last guard, so that
  // an allocation the machine refuses ends in a message, not an abort.
  try {
    if (*inspect_cmd) return RunInspect(inspect, std::cout, std::cerr);
    if (*verify_cmd) return RunVerify(verify, std::cout, std::cerr);
    if (*convert_cmd) return RunConvert(conv, std::cout, std::cerr);
  } catch (const std::bad_alloc&) {
    std::cerr << "ckfmt: out of memory\n";
  }
  return kExitError;
}
