// Internal to the HTML report (html_report.cc, html_flame.cc): its helpers.
// Its data is written with the one JSON writer of src/report
// (json_writer.h) in the kHtmlScript style.

#ifndef MEMSTEP_SRC_REPORT_HTML_INTERNAL_H_
#define MEMSTEP_SRC_REPORT_HTML_INTERNAL_H_

#include <cstdint>
#include <string>

#include "src/analysis/analysis.h"
#include "src/report/json_writer.h"

namespace memstep::report::html {

// "host", "mmap", "device 0", ... (a site's or stage peak's memory kind).
std::string KindName(analysis::SiteKind kind, int32_t device);

inline double D(uint64_t v) { return static_cast<double>(v); }

using internal::JsonWriter;

// "flames": the flame graphs of live memory at the end (host, device) and at
// each stage peak (html_flame.cc); then "flames_left_out".
void WriteFlames(const analysis::Report& r, JsonWriter& j);

}  // namespace memstep::report::html

#endif  // MEMSTEP_SRC_REPORT_HTML_INTERNAL_H_
