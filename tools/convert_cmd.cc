#include "convert_cmd.h"

#include "ckfmt/utf8.h"

#include "exit_codes.h"
#include "progress.h"

namespace ckfmt::tools {

int RunConvert(ConvertCmdOptions& o, std::ostream& out, std::ostream& err) {
  if (!o.to.empty()) {
    auto f = convert::ParseFormat(o.to);
    if (!f.ok()) {
      err << "ckfmt convert: " << f.status().message() << "\n";
      return kExitError;
    }
    o.convert.to = *f;
  }
  o.convert.memory_budget = o.budget_mib << 20;
  ProgressBar bar("converting", !o.quiet && StderrIsTerminal());
  o.convert.progress = [&](uint64_t done, uint64_t total, const std::string&) {
    bar.Update(done, total);
  };
  auto report = convert::Run(o.convert);
  bar.Finish();
  if (!report.ok()) {
    err << "ckfmt convert: " << EscapeControlCharacters(report.status().ToString()) << "\n";
    StatusCode c = report.status().code();
    if (c == StatusCode::kUnsupported) return kExitUnsupported;
    return c == StatusCode::kIOError || c == StatusCode::kNotFound ||
                   c == StatusCode::kInvalidArgument
               ? kExitError
               : kExitInvalid;
  }
  if (!o.quiet) out << convert::FormatReport(*report);
  return kExitOk;
}

}  // namespace ckfmt::tools
