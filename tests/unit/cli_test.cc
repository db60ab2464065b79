// Tests of the memstep binary: options, errors, exit codes, `run` plumbing.
// MEMSTEP_BIN is the binary under test; FAKE_PRELOAD is an empty shared
// library standing in for libmemstep.so (REAL_PRELOAD, when defined, is the
// real one).

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/cli_runner.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Result = testing::CliResult;
using testing::Slurp;

// Runs memstep with `args` (see RunCli for `env` and `cwd`).
Result Memstep(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
               const std::string& cwd = "") {
  return testing::RunCli(MEMSTEP_BIN, args, env, cwd);
}

TEST(CliTest, HelpAndVersion) {
  Result r = Memstep({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("memstep run"));
  r = Memstep({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("memstep 0."));
  r = Memstep({"run", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* var : {"MEMSTEP_OUT", "MEMSTEP_SAMPLE_INTERVAL", "MEMSTEP_FLUSH_MS"}) {
    EXPECT_THAT(r.out, HasSubstr(var));
  }
  EXPECT_EQ(Memstep({"report", "--help"}).exit_code, 0);
}

TEST(CliTest, UsageErrorsExitOne) {
  EXPECT_EQ(Memstep({}).exit_code, 1);
  Result r = Memstep({"frobnicate"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown command"));
  r = Memstep({"report", "--bogus", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("memstep: error: unknown option '--bogus'"));
  EXPECT_THAT(r.err, HasSubstr("usage: memstep report"));
  r = Memstep({"report"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("missing RUN_DIR"));
  EXPECT_EQ(Memstep({"report", "x", "--format", "xml"}).exit_code, 1);
  EXPECT_EQ(Memstep({"report", "x", "--top"}).exit_code, 1);
  EXPECT_EQ(Memstep({"run", "--bogus", "--", "true"}).exit_code, 1);
  EXPECT_EQ(Memstep({"run", "--out"}).exit_code, 1);
  EXPECT_EQ(Memstep({"run", "--sample-interval", "12Q", "--", "true"}).exit_code, 1);
}

TEST(CliTest, ReportErrors) {
  testing::TempDir dir;
  Result r = Memstep({"report", dir.File("missing")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("memstep: error: "));
  EXPECT_THAT(r.err, HasSubstr("missing: No such file or directory"));
  r = Memstep({"report", dir.path()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no memstep traces"));
  ASSERT_TRUE(testing::WriteFile(dir.File("bad.trace"), std::string(200, 'z')));
  r = Memstep({"report", dir.File("bad.trace")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("not a memstep trace"));
  std::vector<uint8_t> bytes = reader::TraceBuilder().Finish();
  bytes[20] ^= 0xFF;  // corrupt header
  ASSERT_TRUE(testing::WriteFile(dir.File("bad.trace"), bytes));
  r = Memstep({"report", dir.File("bad.trace")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("corrupt memstep trace header"));
}

TEST(CliTest, ReportTextJsonAndTruncation) {
  testing::TempDir dir;
  reader::TraceBuilder b;
  b.String(1, "/opt/app/train");
  b.Mapping(1, 0, 0x1000, 0x9000, 0, 1, "");
  b.Stack(1, {0x1234});
  b.Alloc(1, 1, 0x10, 777777);
  b.Flush();
  b.Alloc(2, 1, 0x20, 1);
  std::vector<uint8_t> bytes = b.Finish();
  bytes.pop_back();
  ASSERT_TRUE(testing::WriteFile(dir.File("p.trace"), bytes));
  Result r = Memstep({"report", dir.path(), "--no-symbolize"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("train+0x1234"));
  EXPECT_THAT(r.out, HasSubstr("760 KiB"));
  EXPECT_THAT(r.err, HasSubstr("p.trace: truncated at offset"));
  r = Memstep({"report", dir.File("p.trace"), "--format=json", "--no-symbolize", "--top", "1"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("\"schema\":\"memstep.report/3\""));
  EXPECT_THAT(r.out, HasSubstr("\"truncated\":true"));
}

// The JSON outputs stream to stdout or -o FILE (never whole in memory): the
// same bytes either way, and a write that fails mid-document exits 1 with
// "cannot write", whatever the gates say; a failed gate with a good output
// still exits 3.
TEST(CliTest, JsonOutputsStreamAndReportWriteFailures) {
  testing::TempDir dir;
  reader::TraceBuilder b;
  b.String(1, "/opt/app/train");
  b.Mapping(1, 0, 0x1000, 0x90000, 0, 1, "");
  for (uint64_t i = 1; i <= 600; ++i) {  // 600 sites: several 64 KiB pieces of JSON
    b.Stack(i, {0x1000 + 16 * i, 0x2000 + 16 * i});
    b.Alloc(i, i, 0x100000 * i, 4096 + i);
  }
  ASSERT_TRUE(testing::WriteFile(dir.File("s.trace"), b.Finish()));
  const std::string trace = dir.File("s.trace");
  for (const std::vector<std::string>& format : {std::vector<std::string>{"--format", "json"},
                                                 {"--format", "perfetto"},
                                                 {"--view", "churn", "--format", "json"}}) {
    SCOPED_TRACE(format.back() + " " + format.front());
    std::vector<std::string> args = {"report", trace, "--no-symbolize"};
    args.insert(args.end(), format.begin(), format.end());
    Result out = Memstep(args);
    ASSERT_EQ(out.exit_code, 0) << out.err;
    std::vector<std::string> to_file = args;
    to_file.insert(to_file.end(), {"-o", dir.File("r.json")});
    Result file = Memstep(to_file);
    EXPECT_EQ(file.exit_code, 0) << file.err;
    EXPECT_EQ(file.out, "");
    EXPECT_EQ(Slurp(dir.File("r.json")), out.out);
    std::vector<std::string> full = args;
    full.insert(full.end(), {"-o", "/dev/full", "--fail-on", "leaks >= 0"});
    Result r = Memstep(full);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err,
                HasSubstr("memstep: error: cannot write /dev/full: No space left on device"));
    std::vector<std::string> nowhere = args;
    nowhere.insert(nowhere.end(), {"-o", dir.File("no/such/dir/r.json")});
    r = Memstep(nowhere);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err,
                HasSubstr("memstep: error: cannot create " + dir.File("no/such/dir/r.json")));
  }
  Result json = Memstep({"report", trace, "--no-symbolize", "--format", "json"});
  EXPECT_GT(json.out.size(), size_t{4 * 64 * 1024});
  Result gate = Memstep({"report", trace, "--no-symbolize", "--format", "json", "-o",
                         dir.File("g.json"), "--fail-on", "leaks >= 0"});
  EXPECT_EQ(gate.exit_code, 3);
  EXPECT_THAT(gate.err, HasSubstr("memstep: gate failed: leaks >= 0"));
  const std::string gated = Slurp(dir.File("g.json"));
  EXPECT_THAT(gated, HasSubstr("\"passed\":false"));
  EXPECT_EQ(gated.back(), '\n');
}

class CliRunTest : public ::testing::Test {
 protected:
  std::vector<std::string> Env(std::vector<std::string> more = {}) {
    more.push_back(std::string("MEMSTEP_LIB=") + FAKE_PRELOAD);
    return more;
  }
  testing::TempDir dir_;
};

TEST_F(CliRunTest, PassesExitCodesThrough) {
  const std::string out = dir_.File("run");
  EXPECT_EQ(Memstep({"run", "--out", out, "--", "sh", "-c", "exit 7"}, Env()).exit_code, 7);
  EXPECT_EQ(Memstep({"run", "--out", out, "--", "true"}, Env()).exit_code, 0);
  EXPECT_EQ(Memstep({"run", "--out", out, "sh", "-c", "kill -TERM $$"}, Env()).exit_code,
            128 + SIGTERM);
  Result r = Memstep({"run", "--out", out, "--", "no-such-command-xyz"}, Env());
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_THAT(r.err, HasSubstr("no-such-command-xyz: command not found"));
  // A command that cannot be found leaves no run directory behind.
  const std::string fresh = dir_.File("never-created");
  r = Memstep({"run", "--out", fresh, "--", "no-such-command-xyz"}, Env());
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(access(fresh.c_str(), F_OK), 0);
  EXPECT_EQ(Memstep({"run", "--out", fresh, "--", "./no/such/path"}, Env()).exit_code, 127);
  EXPECT_NE(access(fresh.c_str(), F_OK), 0);
}

TEST_F(CliRunTest, SetsTheEnvironment) {
  const std::string out = dir_.File("a/b");  // created with its parents
  Result r = Memstep(
      {"run", "--out", out, "--sample-interval", "512KiB", "--flush-ms=50", "--", "sh", "-c",
       "echo $LD_PRELOAD; echo $MEMSTEP_DIR; "
       "echo $MEMSTEP_SAMPLE_INTERVAL $MEMSTEP_FLUSH_MS"},
      Env({"LD_PRELOAD=/usr/lib/user.so"}));
  // The user's LD_PRELOAD is kept after ours (and the loader may complain
  // that /usr/lib/user.so does not exist: that is fine).
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(std::string(FAKE_PRELOAD) + ":/usr/lib/user.so\n"));
  EXPECT_THAT(r.out, HasSubstr(out + "\n"));
  EXPECT_THAT(r.out, HasSubstr("524288 50\n"));
  EXPECT_THAT(r.err, HasSubstr("memstep: run directory: " + out));
  EXPECT_THAT(r.err, HasSubstr("memstep report " + out));

  // Environment variables work too, and the option wins.
  r = Memstep({"run", "--sample-interval", "1M", "--", "sh", "-c", "echo $MEMSTEP_SAMPLE_INTERVAL"},
              Env({"MEMSTEP_OUT=" + out, "MEMSTEP_SAMPLE_INTERVAL=4K"}));
  EXPECT_EQ(r.out, "1048576\n");
  r = Memstep({"run", "--", "sh", "-c", "echo $MEMSTEP_SAMPLE_INTERVAL $MEMSTEP_DIR"},
              Env({"MEMSTEP_OUT=" + out, "MEMSTEP_SAMPLE_INTERVAL=4K"}));
  EXPECT_EQ(r.out, "4096 " + out + "\n");

  // Progressive sampling: on unless --fixed-interval (or MEMSTEP_PROGRESSIVE=0).
  r = Memstep({"run", "--sample-warm", "64K", "--", "sh", "-c",
               "echo $MEMSTEP_SAMPLE_WARM $MEMSTEP_PROGRESSIVE"},
              Env({"MEMSTEP_OUT=" + out}));
  EXPECT_EQ(r.out, "65536 1\n");
  r = Memstep({"run", "--fixed-interval", "--", "sh", "-c", "echo $MEMSTEP_PROGRESSIVE"},
              Env({"MEMSTEP_OUT=" + out}));
  EXPECT_EQ(r.out, "0\n");
  r = Memstep({"run", "--", "sh", "-c", "echo $MEMSTEP_PROGRESSIVE"},
              Env({"MEMSTEP_OUT=" + out, "MEMSTEP_PROGRESSIVE=0"}));
  EXPECT_EQ(r.out, "0\n");
  EXPECT_EQ(
      Memstep({"run", "--sample-warm", "0", "--", "true"}, Env({"MEMSTEP_OUT=" + out})).exit_code,
      1);

  // Sizes in the one grammar (src/format/quantity.h): SI and IEC, fractions.
  r = Memstep({"run", "--sample-interval", "1MB", "--sample-warm", "1.5KiB", "--", "sh", "-c",
               "echo $MEMSTEP_SAMPLE_INTERVAL $MEMSTEP_SAMPLE_WARM"},
              Env({"MEMSTEP_OUT=" + out}));
  EXPECT_EQ(r.out, "1000000 1536\n");
  r = Memstep({"run", "--sample-interval", "12Q", "--", "true"}, Env({"MEMSTEP_OUT=" + out}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("1000-based"), std::string::npos) << r.err;

  // The leak hunt's budget: a percentage, "%" optional; the option wins.
  r = Memstep({"run", "--hunt-budget", "25%", "--", "sh", "-c", "echo $MEMSTEP_HUNT_BUDGET"},
              Env({"MEMSTEP_OUT=" + out, "MEMSTEP_HUNT_BUDGET=5"}));
  EXPECT_EQ(r.out, "25\n");
  r = Memstep({"run", "--hunt-budget", "2.5%", "--", "sh", "-c", "echo $MEMSTEP_HUNT_BUDGET"},
              Env({"MEMSTEP_OUT=" + out}));
  EXPECT_EQ(r.out, "2.5\n");
  r = Memstep({"run", "--", "sh", "-c", "echo $MEMSTEP_HUNT_BUDGET"},
              Env({"MEMSTEP_OUT=" + out, "MEMSTEP_HUNT_BUDGET=0"}));
  EXPECT_EQ(r.out, "0\n");
  for (const char* bad : {"101", "-1", "ten", "10%%", "1MiB"}) {
    r = Memstep({"run", "--hunt-budget", bad, "--", "true"}, Env({"MEMSTEP_OUT=" + out}));
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_NE(r.err.find("not a percentage 0..100"), std::string::npos) << bad << ": " << r.err;
  }
}

TEST_F(CliRunTest, DefaultRunDirectoryIsCreatedInCwd) {
  Result r = Memstep({"run", "--", "sh", "-c", "echo $MEMSTEP_DIR"}, Env(), dir_.path());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr(dir_.path() + "/memstep-"));
}

TEST_F(CliRunTest, UnwritableOutputAndMissingLibraryDoNotRunTheCommand) {
  const std::string marker = dir_.File("ran");
  Result r = Memstep({"run", "--out", "/dev/null/x", "--", "touch", marker}, Env());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("memstep: error: cannot create run directory /dev/null/x"));
  r = Memstep({"run", "--out", dir_.File("o"), "--", "touch", marker},
              {"MEMSTEP_LIB=/nonexistent/libmemstep.so"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("MEMSTEP_LIB=/nonexistent/libmemstep.so"));
  EXPECT_NE(access(marker.c_str(), F_OK), 0);
}

TEST_F(CliRunTest, ForwardsSigtermToTheCommand) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("MEMSTEP_LIB", FAKE_PRELOAD, 1);
    dup2(fds[1], 1);
    close(fds[0]);
    const std::string out = dir_.File("sig");
    execl(MEMSTEP_BIN, MEMSTEP_BIN, "run", "--out", out.c_str(), "--", "sh", "-c",
          "trap 'exit 9' TERM; echo ready; while :; do :; done", static_cast<char*>(nullptr));
    _exit(201);
  }
  close(fds[1]);
  char buf[6] = {};
  ASSERT_EQ(read(fds[0], buf, 6), 6);  // "ready\n": the trap is installed
  EXPECT_EQ(std::string(buf, 6), "ready\n");
  kill(pid, SIGTERM);  // to memstep only; it must pass it on
  int status = 0;
  waitpid(pid, &status, 0);
  close(fds[0]);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 9);
}

#ifdef REAL_PRELOAD
TEST_F(CliRunTest, RealLibraryIsFoundNextToTheBinary) {
  // No MEMSTEP_LIB: <bin>/../lib/libmemstep.so must be found.
  Result r = Memstep({"run", "--out", dir_.File("real"), "--", "sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
}
#endif

}  // namespace
}  // namespace memstep
