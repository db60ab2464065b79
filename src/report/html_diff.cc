#include "src/report/html_diff.h"

#include "absl/strings/str_cat.h"
#include "src/report/diff_report.h"
#include "src/report/html_assets.h"
#include "src/report/html_page.h"

namespace memstep::report {

extern const char kHtmlDiffScript[];  // html_diff.js (html_diff_assets.cc)

namespace {

// The diff page's own rules, after the report's style sheet.
constexpr char kDiffStyle[] =
    "tr.group th { background: #fff; padding-top: 10px; }\n"
    "td.up { color: #b30000; }\ntd.down { color: #1a7f37; }\n"
    "td.status.new { color: #b30000; }\ntd.status.gone { color: #666; }\n"
    "#sites-table td.where { min-width: 200px; }\n";

// JSON text made safe inside <script type="application/json">: <, > and &
// occur only inside its strings, where \u escapes mean the same characters.
std::string ScriptSafe(const std::string& json) {
  std::string out;
  out.reserve(json.size() + 64);
  for (char c : json) {
    switch (c) {
      case '<':
        out += "\\u003c";
        break;
      case '>':
        out += "\\u003e";
        break;
      case '&':
        out += "\\u0026";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

std::string FormatDiffHtml(const analysis::Diff& d, const ReportOptions& o) {
  std::string json = FormatDiffJson(d, o);
  while (!json.empty() && json.back() == '\n') json.pop_back();
  const size_t shown = o.top > 0 && d.sites.size() > static_cast<size_t>(o.top)
                           ? static_cast<size_t>(o.top)
                           : d.sites.size();
  // The JSON object with the number of sites --top left out first.
  json = absl::StrCat("{\"sites_left_out\":", d.sites.size() - shown, ",", json.substr(1));
  const std::string title = absl::StrCat(d.base_path, " -> ", d.new_path);
  // The report's Content-Security-Policy: no network request of any kind.
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
      "<meta name=\"generator\" content=\"memstep diff --format html\">\n"
      "<title>memstep diff: ",
      HtmlEscape(title), "</title>\n<style>\n", kHtmlStyle, kDiffStyle,
      "</style>\n</head>\n<body>\n<header id=\"head\"></header>\n<main id=\"main\"></main>\n"
      "<noscript>This page is drawn by its inline script: enable JavaScript.</noscript>\n"
      "<script type=\"application/json\" id=\"memstep-data\">",
      ScriptSafe(json), "</script>\n<script>\n", kHtmlDiffScript, "</script>\n</body>\n</html>\n");
}

}  // namespace memstep::report
