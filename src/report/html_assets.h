// The HTML report's style sheet and script (html_page.css, html_page.js),
// compiled in from the build tree's html_assets.cc. Internal to src/report.

#ifndef MEMSTEP_SRC_REPORT_HTML_ASSETS_H_
#define MEMSTEP_SRC_REPORT_HTML_ASSETS_H_

namespace memstep::report {

extern const char kHtmlStyle[];
extern const char kHtmlScript[];

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_HTML_ASSETS_H_
