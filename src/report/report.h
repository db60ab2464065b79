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
//  - JSON: schema "memstep.report/2" (docs/report-schema.md); strings
//    escaped per RFC 8259; non-finite numbers written as null.

#ifndef MEMSTEP_SRC_REPORT_REPORT_H_
#define MEMSTEP_SRC_REPORT_REPORT_H_

#include <cstdint>
#include <string>

#include "src/analysis/analysis.h"

namespace memstep::report {

inline constexpr char kJsonSchema[] = "memstep.report/2";

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

// Escapes `s` as the contents of a JSON string (without the quotes).
std::string JsonEscape(const std::string& s);

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_REPORT_H_
