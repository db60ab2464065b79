// Shared fixture and helpers of the symbolizer tests: a temporary directory,
// the Module of the planted-facts library, and small file/shell helpers.
//
// Contract: test-only; shell helpers quote paths with '' and assume paths
// without quotes (temporary directories from mkdtemp).

#ifndef MEMSTEP_TESTS_SYMBOLIZE_SYMBOLIZER_TEST_UTIL_H_
#define MEMSTEP_TESTS_SYMBOLIZE_SYMBOLIZER_TEST_UTIL_H_

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"
#include "src/symbolize/symbolizer.h"
#include "tests/symbolize/loaded_module.h"
#include "tests/symbolize/symbolize_testlib.h"

namespace memstep::symbolize::testing {

using ::memstep_symtest::Capture;

inline constexpr char kLibSource[] = "symbolize_testlib.cc";

inline std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

inline std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

inline int Shell(const std::string& command) { return std::system(command.c_str()); }

inline bool HaveTool(const char* tool) {
  return Shell(std::string("command -v ") + tool + " >/dev/null 2>&1") == 0;
}

class SymbolizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = ::testing::TempDir() + "/memstep_symbolize_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    temp_dir_ = new std::string(pattern);
  }
  static void TearDownTestSuite() {
    Shell("rm -rf '" + *temp_dir_ + "'");
    delete temp_dir_;
    temp_dir_ = nullptr;
  }

  // The module of the test library, as the recorder would describe it.
  static Module LibModule() {
    Module module;
    EXPECT_TRUE(
        LoadedModuleOf(reinterpret_cast<void*>(&memstep_symtest::OuterNamespaced), &module));
    EXPECT_FALSE(module.build_id.empty());
    return module;
  }

  static std::string TempPath(const std::string& name) { return *temp_dir_ + "/" + name; }

  static inline std::string* temp_dir_ = nullptr;
};

inline SymbolizerOptions NoDebugRoots() {
  SymbolizerOptions options;
  options.debug_roots.clear();
  return options;
}

inline uint64_t Ip(const Capture& c) { return reinterpret_cast<uint64_t>(c.return_address); }

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace memstep::symbolize::testing

#endif  // MEMSTEP_TESTS_SYMBOLIZE_SYMBOLIZER_TEST_UTIL_H_
