// Internal to the HTML report (html_report.cc, html_flame.cc): its JSON
// writer and helpers.

#ifndef MEMSTEP_SRC_REPORT_HTML_INTERNAL_H_
#define MEMSTEP_SRC_REPORT_HTML_INTERNAL_H_

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/analysis/analysis.h"

namespace memstep::report::html {

// A JSON string (with its quotes) safe inside <script type="application/json">:
// JSON-escaped, and '<', '>', '&', U+2028, U+2029 as \u escapes.
std::string HtmlJsonString(const std::string& s);

// "host", "mmap", "device 0", ... (a site's or stage peak's memory kind).
std::string KindName(analysis::SiteKind kind, int32_t device);

inline double D(uint64_t v) { return static_cast<double>(v); }

// A small JSON writer: commas follow from the nesting.
class Json {
 public:
  void Open(char c) {
    Comma();
    out_ += c;
    first_ = true;
  }
  void Close(char c) {
    out_ += c;
    first_ = false;
  }
  void Key(const char* k) {
    Comma();
    absl::StrAppend(&out_, "\"", k, "\":");
    first_ = true;
  }
  void Str(const std::string& s) {
    Comma();
    out_ += HtmlJsonString(s);
  }
  void Num(double v) {
    Comma();
    if (!std::isfinite(v)) {
      out_ += "null";
    } else if (v == std::floor(v) && std::fabs(v) < 9e15) {
      absl::StrAppend(&out_, static_cast<int64_t>(v));
    } else {
      absl::StrAppend(&out_, absl::StrFormat("%.6g", v));
    }
  }
  void Bool(bool b) {
    Comma();
    out_ += b ? "true" : "false";
  }
  // Key and value in one.
  void F(const char* k, const std::string& v) { Key(k), Str(v); }
  void F(const char* k, const char* v) { Key(k), Str(v); }
  void F(const char* k, double v) { Key(k), Num(v); }
  void B(const char* k, bool v) { Key(k), Bool(v); }
  std::string& out() { return out_; }

 private:
  void Comma() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  std::string out_;
  bool first_ = true;
};

// "flames": the flame graphs of live memory at the end (host, device) and at
// each stage peak (html_flame.cc); then "flames_left_out".
void WriteFlames(const analysis::Report& r, Json& j);

}  // namespace memstep::report::html

#endif  // MEMSTEP_SRC_REPORT_HTML_INTERNAL_H_
