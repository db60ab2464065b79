// Renders an analysis::Report for people (text) and programs (JSON).
//
// Contract:
//  - Pure functions of the Report and the options: no I/O, deterministic.
//  - Text: header (processes), Growth (classes, rates, CI, projections),
//    Gates (when any), Alerts, Stage peaks, Epochs, exact totals, per-step
//    table, top call sites at the end and at the peak. Long step tables are shortened (rule in
//    FormatText below); JSON always holds every row and every site. Device
//    sections (text_device.cc) appear only when the trace has device records,
//    so a host-only report is the same as before them.
//  - JSON: schema "memstep.report/3" (docs/report-schema.md); strings
//    escaped per RFC 8259; non-finite numbers written as null. WriteJson
//    streams the same bytes to a TextSink in pieces of about 64 KiB, so the
//    document is never whole in memory (issue 11 "Scale"); a site's series
//    are written by their change points, so the size grows with what the
//    sites did, not with steps x sites.

#ifndef MEMSTEP_SRC_REPORT_REPORT_H_
#define MEMSTEP_SRC_REPORT_REPORT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "src/analysis/analysis.h"

namespace memstep::report {

inline constexpr char kJsonSchema[] = "memstep.report/3";

struct ReportOptions {
  int top = 10;    // call sites per table (text); JSON: 0 = all sites
  int frames = 8;  // frames per stack (text); JSON: 0 = all frames
  // Step tables longer than this show the first `edge_rows`, the last
  // `edge_rows` and the `peak_rows` rows with the largest peaks, in step
  // order, with one "..." line per gap.
  int max_step_rows = 20;
  int edge_rows = 5;
  int peak_rows = 5;
};

// "0 B", "512 B", "1.5 KiB", "12.0 MiB", "3.25 GiB" (1024-based).
std::string HumanBytes(double bytes);
// "12,345,678"
std::string Thousands(uint64_t n);

std::string FormatText(const analysis::Report& report, const ReportOptions& options = {});

// JSON options: `top` and `frames` apply when > 0 (the CLI passes them only
// when the user gave --top / --frames).
std::string FormatJson(const analysis::Report& report, const ReportOptions& options = {0, 0});

// Receives an output's text in order, in pieces; returns false when it could
// not write one (the writer then passes nothing more on).
using TextSink = std::function<bool(std::string_view)>;

// FormatJson's bytes, passed to `sink` as they are made, in pieces of about
// 64 KiB; false when the sink failed.
bool WriteJson(const analysis::Report& report, const ReportOptions& options, const TextSink& sink);

// Escapes `s` as the contents of a JSON string (without the quotes).
std::string JsonEscape(const std::string& s);

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_REPORT_H_
