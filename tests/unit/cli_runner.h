// Runs the memstep binary in a child process for the CLI tests: captures its
// exit code, stdout and stderr. Shared by cli_test.cc and report_cli_test.cc.

#ifndef MEMSTEP_TESTS_UNIT_CLI_RUNNER_H_
#define MEMSTEP_TESTS_UNIT_CLI_RUNNER_H_

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"

namespace memstep::testing {

struct CliResult {
  int exit_code = -1;  // 128 + signal if killed
  std::string out;
  std::string err;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `bin args...`. MEMSTEP_* settings and LD_PRELOAD are cleared first,
// then `env` entries ("K=V", or "K" to unset) change the inherited
// environment; `cwd` (if not empty) is the child's working directory.
inline CliResult RunCli(const std::string& bin, const std::vector<std::string>& args,
                        const std::vector<std::string>& env = {}, const std::string& cwd = "") {
  TempDir io;
  const std::string out = io.File("out"), err = io.File("err");
  pid_t pid = fork();
  if (pid == 0) {
    for (const char* k : {"MEMSTEP_OUT", "MEMSTEP_SAMPLE_INTERVAL", "MEMSTEP_FLUSH_MS",
                          "MEMSTEP_LIB", "LD_PRELOAD"}) {
      unsetenv(k);
    }
    for (const std::string& e : env) {
      size_t eq = e.find('=');
      if (eq == std::string::npos) {
        unsetenv(e.c_str());
      } else {
        setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
      }
    }
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(200);
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<std::string> copy = {bin};
    copy.insert(copy.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(201);
  }
  CliResult r;
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

}  // namespace memstep::testing

#endif  // MEMSTEP_TESTS_UNIT_CLI_RUNNER_H_
