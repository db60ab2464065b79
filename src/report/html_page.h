// The page of the HTML report (html_report.cc): inline CSS and script, no
// external resources. Internal to src/report.

#ifndef MEMSTEP_SRC_REPORT_HTML_PAGE_H_
#define MEMSTEP_SRC_REPORT_HTML_PAGE_H_

#include <string>

namespace memstep::report {

// The whole document: `title` (HTML-escaped here) and `data_json`, a JSON
// object that must not contain "<" (html_report.cc escapes it), placed in
// <script type="application/json" id="memstep-data"> for the page's script.
std::string HtmlPage(const std::string& title, const std::string& data_json);

// `s` with & < > " ' as character references.
std::string HtmlEscape(const std::string& s);

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_HTML_PAGE_H_
