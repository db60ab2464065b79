// The HTML report's document around its data (html_page.h).

#include "src/report/html_page.h"

#include "absl/strings/str_cat.h"
#include "src/report/html_assets.h"

namespace memstep::report {

std::string HtmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string HtmlPage(const std::string& title, const std::string& data_json) {
  // The Content-Security-Policy forbids every network request: the page
  // must work from a file with nothing else.
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n"
      "<meta name=\"generator\" content=\"memstep report --format html\">\n"
      "<title>memstep report: ",
      HtmlEscape(title), "</title>\n<style>\n", kHtmlStyle,
      "</style>\n</head>\n<body>\n<header id=\"head\"></header>\n<main id=\"main\"></main>\n"
      "<noscript>This report is drawn by its inline script: enable JavaScript.</noscript>\n"
      "<script type=\"application/json\" id=\"memstep-data\">",
      data_json, "</script>\n<script>\n", kHtmlScript, "</script>\n</body>\n</html>\n");
}

}  // namespace memstep::report
