// The JSON writer of src/report (json_writer.h).

#include "src/report/json_writer.h"

#include <cmath>

namespace memstep::report::internal {

std::string HtmlJsonString(const std::string& s) {
  const std::string e = JsonEscape(s);
  std::string out = "\"";
  out.reserve(e.size() + 2);
  for (size_t i = 0; i < e.size(); ++i) {
    const char c = e[i];
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else if (static_cast<unsigned char>(c) == 0xE2 && i + 2 < e.size() &&
               static_cast<unsigned char>(e[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(e[i + 2]) == 0xA8 ||
                static_cast<unsigned char>(e[i + 2]) == 0xA9)) {
      out += static_cast<unsigned char>(e[i + 2]) == 0xA8 ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

void JsonWriter::Double(double v) {
  if (!std::isfinite(v)) {
    Value("null");
  } else if (v == std::floor(v) && std::fabs(v) < 9e15) {
    Value(absl::StrCat(static_cast<int64_t>(v)));
  } else if (style_ == Style::kHtmlScript) {
    Value(absl::StrFormat("%.6g", v));
  } else {
    Value(absl::StrFormat("%.17g", v));
  }
}

void JsonWriter::Fixed(double v, int decimals) {
  Value(std::isfinite(v) ? absl::StrFormat("%.*f", decimals, v) : std::string("null"));
}

}  // namespace memstep::report::internal
