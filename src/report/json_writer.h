// The one streaming JSON writer of src/report: the JSON documents (the
// report, the churn view, the diff) and the data of the HTML page. Internal
// to src/report.
//
// Contract: commas follow from the nesting (the caller keeps it balanced);
// keys and strings are escaped per RFC 8259 (JsonEscape: invalid UTF-8
// becomes U+FFFD); non-finite numbers are written as null, integral ones
// (below 9e15 in magnitude) as integers. The style sets the rest:
//  - kPlain: reals with 17 significant digits (they read back exactly);
//  - kHtmlScript: the text is safe inside <script type="application/json">:
//    '<', '>', '&', U+2028 and U+2029 are \u escapes, so no string can close
//    the element or start a comment in it; reals with 6 significant digits.
// Fixed writes a real with a set number of decimals in either style (the
// Perfetto export's microsecond timestamps), NewLine puts the next element on
// a line of its own and EndLine ends the text with a newline; otherwise the
// text has no whitespace.
//
// Output: kept whole for Take (the HTML page embeds its data, tests compare
// strings), or streamed: given a TextSink, the writer holds at most
// kFlushBytes plus one value and passes the text on whenever that fills, and
// the rest at Finish. Both give the same bytes. After the sink fails once the
// writer drops the text and Finish returns false: a document too large for
// memory is never built to report a write error.

#ifndef MEMSTEP_SRC_REPORT_JSON_WRITER_H_
#define MEMSTEP_SRC_REPORT_JSON_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/analysis/analysis.h"
#include "src/report/report.h"

namespace memstep::report::internal {

// `s` as a JSON string, with its quotes, safe inside a <script> element.
std::string HtmlJsonString(const std::string& s);

class JsonWriter {
 public:
  enum class Style { kPlain, kHtmlScript };

  // Bytes gathered before a streaming writer passes them to its sink.
  static constexpr size_t kFlushBytes = 64 * 1024;

  // Keeps the whole text, for Take.
  explicit JsonWriter(Style style = Style::kPlain) : style_(style) {}
  // Streams the text to `sink`; end with Finish.
  explicit JsonWriter(TextSink sink, Style style = Style::kPlain)
      : style_(style), sink_(std::move(sink)) {
    out_.reserve(kFlushBytes + 256);
  }

  void BeginObject() { Value("{"), first_ = true; }
  void EndObject() { Close('}'); }
  void BeginArray() { Value("["), first_ = true; }
  void EndArray() { Close(']'); }
  // The next value, or the closing bracket, starts a new line (after its
  // comma): one element per line in a long array. JSON ignores the newline.
  void NewLine() { newline_ = true; }
  void Key(const std::string& k) {
    Comma();
    out_ += Quote(k);
    out_ += ':';
    after_key_ = true;
  }
  void String(const std::string& s) { Value(Quote(s)); }
  void Uint(uint64_t v) { Value(absl::StrCat(v)); }
  void Int(int64_t v) { Value(absl::StrCat(v)); }
  void Bool(bool v) { Value(v ? "true" : "false"); }
  void Double(double v);
  // `v` with exactly `decimals` digits after the point ("%.*f"), whatever
  // the style; non-finite: null.
  void Fixed(double v, int decimals);
  // k and its value: a string, number, bool, or an array of strings.
  template <typename T>
  void Field(const std::string& k, const T& v) {
    Key(k);
    Put(v);
  }
  // A newline after the document (outside any value).
  void EndLine() {
    out_ += '\n';
    MaybeFlush();
  }
  // The whole text (the writer without a sink).
  std::string Take() { return std::move(out_); }
  // Passes what is left to the sink; false when any write failed.
  bool Finish() {
    Flush();
    return !failed_;
  }

 private:
  std::string Quote(const std::string& s) const {
    return style_ == Style::kHtmlScript ? HtmlJsonString(s)
                                        : absl::StrCat("\"", JsonEscape(s), "\"");
  }
  void Put(const std::string& v) { String(v); }
  void Put(const char* v) { String(v); }
  void Put(bool v) { Bool(v); }
  void Put(double v) { Double(v); }
  void Put(uint64_t v) { Uint(v); }
  void Put(uint32_t v) { Uint(v); }
  void Put(int64_t v) { Int(v); }
  void Put(int v) { Int(v); }
  void Put(const std::vector<std::string>& v) {
    BeginArray();
    for (const std::string& s : v) String(s);
    EndArray();
  }
  void Comma() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void Value(const std::string& v) {
    if (after_key_) {
      after_key_ = false;
    } else {
      Comma();
    }
    BreakLine();
    out_ += v;
    MaybeFlush();
  }
  void Close(char bracket) {
    BreakLine();
    out_ += bracket;
    first_ = false;
    MaybeFlush();
  }
  void MaybeFlush() {
    if (sink_ && out_.size() >= kFlushBytes) Flush();
  }
  void Flush() {
    if (!sink_) return;
    if (!failed_ && !out_.empty()) failed_ = !sink_(out_);
    out_.clear();
  }
  void BreakLine() {
    if (newline_) out_ += '\n';
    newline_ = false;
  }

  Style style_;
  TextSink sink_;        // empty: keep the whole text
  bool failed_ = false;  // the sink failed: drop the text
  std::string out_;
  bool first_ = true;
  bool after_key_ = false;
  bool newline_ = false;
};

// One --fail-on gate as an object: expression, metric, value, with_unit:
// the value's unit ("bytes", "bytes/step", "count" or "%", memstep diff),
// passed, detail.
inline void WriteGate(JsonWriter& w, const analysis::GateResult& g, bool with_unit = false) {
  w.BeginObject();
  w.Field("expression", g.expression);
  w.Field("metric", g.metric);
  w.Field("value", g.value);
  if (with_unit) {
    const bool per_step = g.metric.find("growth") != std::string::npos || g.metric == "churn";
    w.Field("unit", g.percent             ? "%"
                    : g.metric == "leaks" ? "count"
                    : per_step            ? "bytes/step"
                                          : "bytes");
  }
  w.Field("passed", g.passed);
  w.Field("detail", g.detail);
  w.EndObject();
}

// "frames": the first max_frames (0: all), innermost first.
inline void WriteFrames(JsonWriter& w, const std::vector<analysis::Frame>& frames, int max_frames) {
  w.Key("frames");
  w.BeginArray();
  for (size_t i = 0; i < frames.size(); ++i) {
    if (max_frames > 0 && i >= static_cast<size_t>(max_frames)) break;
    const analysis::Frame& f = frames[i];
    w.BeginObject();
    w.Field("function", f.function);
    w.Field("file", f.file);
    w.Field("line", f.line);
    w.Field("module", f.module);
    w.Field("inlined", f.inlined);
    w.Field("ip", absl::StrFormat("0x%x", f.ip));
    w.Field("module_offset", absl::StrFormat("0x%x", f.module_offset));
    w.Field("symbolized", f.symbolized);
    w.EndObject();
  }
  w.EndArray();
}

// A site's churn (Site::churn_*) as an object: bytes_per_step, its 95 %
// interval, count_per_step, its interval, bytes_share, count_share.
inline void WriteChurn(JsonWriter& w, const analysis::Site& s) {
  auto ci = [&](const char* key, double value, double low, double high) {
    w.Key(key);
    w.BeginArray();
    w.Double(high < 0 ? value : low);
    w.Double(high < 0 ? value : high);
    w.EndArray();
  };
  w.BeginObject();
  w.Field("bytes_per_step", s.churn_bytes_per_step);
  ci("bytes_per_step_ci", s.churn_bytes_per_step, s.churn_bytes_per_step_low,
     s.churn_bytes_per_step_high);
  w.Field("count_per_step", s.churn_count_per_step);
  ci("count_per_step_ci", s.churn_count_per_step, s.churn_count_per_step_low,
     s.churn_count_per_step_high);
  w.Field("bytes_share", s.churn_bytes_share);
  w.Field("count_share", s.churn_count_share);
  w.EndObject();
}

}  // namespace memstep::report::internal

#endif  // MEMSTEP_SRC_REPORT_JSON_WRITER_H_
