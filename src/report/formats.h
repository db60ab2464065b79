// Exports of an analysis::Report for other tools (`memstep report --format`):
// folded stacks (flame graphs), CSV (the per-step table), Chrome trace-event
// JSON (Perfetto UI, chrome://tracing), pprof (profile.proto, gzipped) and
// a self-contained HTML page.
//
// Contract:
//  - Pure functions of the Report and their options: no I/O, deterministic
//    (the same Report gives the same bytes). The Write* forms pass the same
//    bytes to a TextSink in pieces instead of returning them whole.
//  - Each needs only what the text report needs, plus, for Perfetto, the
//    step/stage timeline (analysis::Options::timeline), which grows with the
//    step table, and for pprof the sites' (step, stage) slices
//    (Options::site_slices), which grow with the sampled allocations, not
//    with the trace.
//  - Every string from a trace (function names, paths, stage names, command
//    lines) is escaped for its format: folded frames lose ';' and control
//    characters, CSV fields are quoted per RFC 4180, JSON strings escaped per
//    RFC 8259, protobuf strings are length-delimited bytes (any content).
//  - Sampled quantities are the unbiased (Horvitz-Thompson) estimates of the
//    analysis, rounded to whole bytes / allocations where a format needs
//    integers.

#ifndef MEMSTEP_SRC_REPORT_FORMATS_H_
#define MEMSTEP_SRC_REPORT_FORMATS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "src/analysis/analysis.h"
#include "src/report/report.h"

namespace memstep::report {

// Which stacks a folded export holds (--view).
struct FoldedView {
  enum class Kind : uint8_t {
    kLiveEnd,  // "live-end": every site's estimated live bytes at the end
    kPeak,     // "peak": live at the peak (host sites: their process's host
               // peak; device sites: their device's peak)
    kStage,    // "stage:NAME": the sites live at stage NAME's largest peak
    kClass,    // "class:CLASS": live at the end of the sites of one growth class
  };
  Kind kind = Kind::kLiveEnd;
  std::string stage;                                         // kStage
  analysis::GrowthClass cls = analysis::GrowthClass::kLeak;  // kClass
};

// "live-end", "peak", "stage:forward", "class:LEAK" (class names as the
// report prints them, case-insensitive; "class:BOUNDED" is short for
// BOUNDED_GROWTH). An error names the accepted forms.
absl::StatusOr<FoldedView> ParseFoldedView(const std::string& text);

// One line per stack: "frame;frame;...;frame VALUE\n", root first, VALUE a
// whole number of bytes (lines with 0 left out), for flamegraph.pl, inferno
// and speedscope. The first frame is the memory kind ("[host]", "[mmap]",
// "[device 0]", ...), preceded by "[pid N]" (and " rank R") when the report
// has more than one process. An unknown stage is an error naming the stages
// there are.
absl::StatusOr<std::string> FormatFolded(const analysis::Report& report, const FoldedView& view);

// The per-step table as CSV (RFC 4180, "\r\n" line ends): one row per step
// per process, a header row naming the columns (docs/cli.md lists them),
// one "stage_peak:NAME" column per stage name and device columns per device
// ordinal seen in the report; a cell is empty where its value does not
// apply (a stage that did not run in that step).
std::string FormatCsv(const analysis::Report& report);

// Quotes `field` for CSV when it needs it (a comma, quote, CR or LF, or
// leading/trailing blanks): "a,b" -> "\"a,b\"", quotes doubled.
std::string CsvField(const std::string& field);

// Chrome trace-event JSON ({"traceEvents": [...]}): per process, counter
// tracks "host live", "RSS", "mmap live" at every step/stage boundary and
// "device N live" at step ends; complete slices for steps and stages;
// instant events for alerts and failed device allocations. Needs a Report
// analyzed with Options::timeline (without it: counters and slices are
// missing, the rest is there). Timestamps are microseconds of wall clock
// since the earliest process's start, so the processes of a run line up.
std::string FormatPerfetto(const analysis::Report& report);
// FormatPerfetto's bytes streamed to `sink` in pieces (WriteJson in
// report.h); false when the sink failed.
bool WritePerfetto(const analysis::Report& report, const TextSink& sink);

// pprof's profile.proto (github.com/google/pprof, proto/profile.proto),
// gzip-wrapped, as `pprof` and speedscope read it. Sample types
// alloc_objects/count, alloc_space/bytes, inuse_objects/count,
// inuse_space/bytes (inuse = live at the end); one sample per call site
// (per site, step and stage of allocation for host sites of a Report
// analyzed with Options::site_slices), with labels "pid", "rank", "kind",
// "class" (its growth class), "device" (device sites), "step" and "stage".
// Locations, functions and lines from the symbolized frames, mappings from
// their modules.
std::string FormatPprof(const analysis::Report& report);

// One self-contained HTML page (html_report.cc; no network, script and
// style inline): what needs attention (failed gates, alerts, growth of the
// heap, RSS or device memory, unattributed growth, out-of-memory), memory
// over steps per process (host live and peak, RSS, device allocated, peak
// and reserved per device) with stage shading and step markers, stage peak
// bars, the growing sites with sparklines and intervals, and flame graphs of
// live memory at the end and at each stage's peak. Aggregated so that its
// size is bounded whatever the number of steps and sites; gates are
// Report::gates as EvaluateGates left them.
std::string FormatHtml(const analysis::Report& report);
// The JSON object the page draws (schema "memstep.html/1"), in which '<',
// '>', '&', U+2028 and U+2029 are \u escapes.
std::string FormatHtmlData(const analysis::Report& report);

}  // namespace memstep::report

#endif  // MEMSTEP_SRC_REPORT_FORMATS_H_
