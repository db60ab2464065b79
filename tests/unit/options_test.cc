// The one option parser of the subcommands (tools/memstep/options.h) and
// the options `report` and `diff` share.

#include "tools/memstep/options.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace memstep::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

FlagSet Flags(bool stop_at_operand = false) {
  FlagSet f;
  f.switches = {"--once"};
  f.valued = {"--top", "-o"};
  f.stop_at_operand = stop_at_operand;
  return f;
}

// Parses `args`, recording "name=value" per option and the operands.
struct Recorder {
  std::vector<std::string> seen;
  absl::StatusOr<ParsedArgs> Parse(const std::vector<std::string>& args,
                                   const FlagSet& flags = Flags()) {
    return ParseArgs(args, flags, [this](const Arg& a) {
      seen.push_back(a.operand() ? "@" + a.value : a.name + "=" + a.value);
      return absl::OkStatus();
    });
  }
};

TEST(ParseArgsTest, OptionsSwitchesAndOperandsInOrder) {
  Recorder r;
  absl::StatusOr<ParsedArgs> p =
      r.Parse({"run1", "--top", "5", "--top=7", "-o", "f", "--once", "-", "run2"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->help);
  EXPECT_THAT(r.seen, ElementsAre("@run1", "--top=5", "--top=7", "-o=f", "--once=", "@-", "@run2"));
}

TEST(ParseArgsTest, ClearErrors) {
  Recorder r;
  EXPECT_EQ(r.Parse({"--bogus"}).status().message(), "unknown option '--bogus'");
  EXPECT_EQ(r.Parse({"--bogus=1"}).status().message(), "unknown option '--bogus=1'");
  EXPECT_EQ(r.Parse({"-x"}).status().message(), "unknown option '-x'");
  // A switch takes no value; a short option takes none after '='.
  EXPECT_EQ(r.Parse({"--once=1"}).status().message(), "unknown option '--once=1'");
  EXPECT_EQ(r.Parse({"-o=f"}).status().message(), "unknown option '-o=f'");
  EXPECT_EQ(r.Parse({"--top"}).status().message(), "--top needs a value");
  EXPECT_EQ(r.Parse({"a", "-o"}).status().message(), "-o needs a value");
  // The value is the next argument, whatever it looks like.
  r.seen.clear();
  ASSERT_TRUE(r.Parse({"--top", "--help"}).ok());
  EXPECT_THAT(r.seen, ElementsAre("--top=--help"));
}

TEST(ParseArgsTest, HelpStopsTheParseAfterEarlierErrors) {
  Recorder r;
  absl::StatusOr<ParsedArgs> p = r.Parse({"--once", "-h", "--bogus"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->help);
  EXPECT_THAT(r.seen, ElementsAre("--once="));
  EXPECT_FALSE(r.Parse({"--bogus", "--help"}).ok());
}

TEST(ParseArgsTest, HandlerErrorEndsTheWalk) {
  int calls = 0;
  absl::StatusOr<ParsedArgs> p = ParseArgs({"a", "b", "c"}, Flags(), [&](const Arg& a) {
    ++calls;
    return a.value == "b" ? absl::InvalidArgumentError("unexpected argument 'b'")
                          : absl::OkStatus();
  });
  EXPECT_EQ(p.status().message(), "unexpected argument 'b'");
  EXPECT_EQ(calls, 2);
}

TEST(ParseArgsTest, CommandFollows) {
  Recorder r;
  absl::StatusOr<ParsedArgs> p = r.Parse({"--once", "python", "--top", "1"}, Flags(true));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rest, 1u);
  EXPECT_THAT(r.seen, ElementsAre("--once="));
  p = r.Parse({"--top", "3", "--", "--once"}, Flags(true));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rest, 3u);
  p = r.Parse({"--once"}, Flags(true));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rest, 1u);  // no command: rest == args.size()
}

constexpr const char* kReportFormats[] = {"text", "json", "folded", "csv"};
constexpr const char* kDiffFormats[] = {"text", "json"};

absl::Status Apply(const std::string& name, const std::string& value, OutputOptions* o,
                   bool relative = false) {
  return ApplyOutputOption(Arg{name, value},
                           relative ? absl::Span<const char* const>(kDiffFormats)
                                    : absl::Span<const char* const>(kReportFormats),
                           relative, o);
}

TEST(OutputOptionsTest, SharedOptions) {
  OutputOptions o;
  ASSERT_TRUE(Apply("--format", "csv", &o).ok());
  ASSERT_TRUE(Apply("--top", "3", &o).ok());
  ASSERT_TRUE(Apply("--frames", "0", &o).ok());
  ASSERT_TRUE(Apply("--output", "x.txt", &o).ok());
  ASSERT_TRUE(Apply("--no-symbolize", "", &o).ok());
  ASSERT_TRUE(Apply("--memory-limit", "1GiB", &o).ok());
  ASSERT_TRUE(Apply("--fail-on", "growth > 1MiB/step", &o).ok());
  EXPECT_EQ(o.format, "csv");
  EXPECT_EQ(o.top, 3);
  EXPECT_EQ(o.frames, 0);
  EXPECT_EQ(o.output, "x.txt");
  EXPECT_FALSE(o.analysis.symbolize);
  EXPECT_EQ(o.analysis.memory_limit, uint64_t{1} << 30);
  ASSERT_EQ(o.gates.size(), 1u);
  EXPECT_TRUE(absl::IsNotFound(Apply("--view", "peak", &o)));
}

TEST(OutputOptionsTest, Errors) {
  OutputOptions o;
  EXPECT_EQ(Apply("--format", "xml", &o).message(),
            "--format must be text, json, folded or csv, not 'xml'");
  EXPECT_EQ(Apply("--format", "csv", &o, /*relative=*/true).message(),
            "--format must be text or json, not 'csv'");
  EXPECT_EQ(Apply("--top", "many", &o).message(), "--top: 'many' is not a count");
  EXPECT_EQ(Apply("--frames", "2000000", &o).message(), "--frames: '2000000' is not a count");
  EXPECT_EQ(Apply("-o", "", &o).message(), "-o needs a file name");
  EXPECT_EQ(Apply("--memory-limit", "0", &o).message(), "--memory-limit must be more than 0");
  EXPECT_THAT(std::string(Apply("--fail-on", "peak > +10%", &o).message()),
              HasSubstr("compares two runs: use memstep diff"));
  EXPECT_TRUE(Apply("--fail-on", "peak > +10%", &o, /*relative=*/true).ok());
  EXPECT_THAT(std::string(Apply("--fail-on", "nonsense > 1", &o).message()),
              HasSubstr("unknown metric 'nonsense'"));
}

TEST(OutputOptionsTest, ReportOptionsDefaults) {
  // Text: the report's defaults unless given; JSON: everything unless given.
  EXPECT_EQ(ResolveReportOptions(false, -1, -1).top, report::ReportOptions().top);
  EXPECT_EQ(ResolveReportOptions(false, -1, -1).frames, report::ReportOptions().frames);
  EXPECT_EQ(ResolveReportOptions(false, 0, 3).top, 0);
  EXPECT_EQ(ResolveReportOptions(false, 0, 3).frames, 3);
  EXPECT_EQ(ResolveReportOptions(true, -1, -1).top, 0);
  EXPECT_EQ(ResolveReportOptions(true, -1, -1).frames, 0);
  EXPECT_EQ(ResolveReportOptions(true, 4, 2).top, 4);
  EXPECT_EQ(ResolveReportOptions(true, 4, 2).frames, 2);
}

}  // namespace
}  // namespace memstep::cli
