// Runs one libFuzzer entry point (reader_fuzz.cc or parsers_fuzz.cc, linked
// in by tests/fuzz/CMakeLists.txt) over every file of a regression directory:
// the minimised crashers and hard cases scripts/fuzz.sh found, kept so that a
// fixed bug stays fixed in every build (GCC, and the sanitizer build in CI).
// An empty or missing directory fails: the test must have inputs to run.

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::string> Inputs(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == ".." || name == "README.md") continue;
    files.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

// One suite name per target (MEMSTEP_REGRESS_SUITE, set in CMakeLists.txt),
// so that ctest can tell the three replays apart.
TEST(MEMSTEP_REGRESS_SUITE, EveryKeptInputRunsCleanly) {
  const std::vector<std::string> files = Inputs(MEMSTEP_REGRESS_DIR);
  ASSERT_FALSE(files.empty()) << "no inputs in " << MEMSTEP_REGRESS_DIR;
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    std::ifstream in(f, std::ios::binary);
    ASSERT_TRUE(in) << "cannot read " << f;
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
  }
}

}  // namespace
