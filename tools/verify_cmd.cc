#include "verify_cmd.h"

#include <sys/stat.h>

#include <ostream>

#include "ckfmt/utf8.h"
#include "exit_codes.h"
#include "inspect.h"
#include "progress.h"

namespace ckfmt::tools {

Json VerifyReportToJson(const std::string& file, const VerifyReport* report, const Status& error) {
  Json out = Json::object();
  out["file"] = file;
  out["ok"] = report != nullptr && report->ok();
  out["file_size"] = report ? report->file_size : 0;
  out["entries"] = report ? report->entries : 0;
  out["chunks"] = report ? report->chunks : 0;
  out["bytes_checked"] = report ? report->bytes_checked : 0;
  out["decoded"] = report != nullptr && report->decoded;
  Json problems = Json::array();
  if (report) {
    for (const auto& p : report->problems) {
      Json j = Json::object();
      j["code"] = StatusCodeName(p.code);
      j["where"] = p.where;
      j["message"] = p.message;
      const std::string_view rule = CitedSpecRule(p.message);
      j["rule"] = rule.empty() ? Json(nullptr) : Json(std::string(rule));
      problems.push_back(std::move(j));
    }
  }
  out["problems"] = std::move(problems);
  if (report) {
    out["error"] = nullptr;
  } else {
    Json e = Json::object();
    e["code"] = StatusCodeName(error.code());
    e["message"] = error.message();
    out["error"] = std::move(e);
  }
  return out;
}

int RunVerify(const VerifyCmdOptions& options, std::ostream& out, std::ostream& err) {
  int rc = kExitOk;
  Json files = Json::array();
  const bool tty = StderrIsTerminal();
  for (const std::string& file : options.files) {
    struct stat st {};
    bool big = ::stat(file.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) > kProgressMinBytes;
    ProgressBar bar("verify " + file, tty && big);
    VerifyOptions vopts;
    vopts.decode = !options.checksums_only;
    if (tty && big) vopts.progress = [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); };
    Result<VerifyReport> result = VerifyFile(file, vopts);
    bar.Finish();

    if (!result.ok()) {
      rc = kExitError;
      err << "ckfmt: " << ErrorLine(file, result.status()) << "\n";
      if (options.json) files.push_back(VerifyReportToJson(file, nullptr, result.status()));
      continue;
    }
    const VerifyReport& report = *result;
    if (!report.ok() && rc == kExitOk) rc = kExitInvalid;
    if (options.json) {
      files.push_back(VerifyReportToJson(file, &report, Status::OK()));
      continue;
    }
    if (options.quiet) continue;
    if (report.ok()) {
      if (options.verbose) {
        out << file << ": OK (" << report.entries << " entries, " << report.chunks << " chunks, "
            << report.bytes_checked << " bytes checked"
            << (report.decoded ? "" : ", checksums only") << ")\n";
      }
      continue;
    }
    out << file << ": INVALID (" << report.problems.size() << " problem"
        << (report.problems.size() == 1 ? "" : "s") << ")\n";
    for (const auto& p : report.problems) {
      // Some messages start with the file name already; do not repeat it.
      std::string_view msg = p.message;
      if (msg.starts_with(file + ": ")) msg.remove_prefix(file.size() + 2);
      out << file << ": " << EscapeControlCharacters(p.where) << ": " << StatusCodeName(p.code)
          << ": " << EscapeControlCharacters(msg) << "\n";
    }
  }
  if (options.json && !options.quiet) {
    Json doc = Json::object();
    doc["files"] = std::move(files);
    doc["ok"] = rc == kExitOk;
    out << DumpJson(doc);
  }
  out.flush();
  return rc;
}

}  // namespace ckfmt::tools
