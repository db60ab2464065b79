// memstep: the command line of the memstep memory profiler (see docs/cli.md).

#include <iostream>
#include <string>
#include <vector>

#include "tools/memstep/cli.h"

#ifndef MEMSTEP_VERSION
#define MEMSTEP_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  using namespace memstep::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << MainUsage();
    return kExitError;
  }
  const std::string command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << MainUsage();
    return kExitOk;
  }
  if (command == "--version" || command == "version") {
    std::cout << "memstep " << MEMSTEP_VERSION << "\n";
    return kExitOk;
  }
  if (command == "run") return RunMain(rest);
  if (command == "report") return ReportMain(rest);
  if (command == "top") return TopMain(rest);
  if (command == "diff") return DiffMain(rest);
  std::cerr << "memstep: error: unknown command '" << command << "'\n" << MainUsage();
  return kExitError;
}
