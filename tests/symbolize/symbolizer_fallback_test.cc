// Fallbacks of the symbolizer: stripped copies (.symtab, .dynsym), separate
// debug info (build-id, .gnu_debuglink), build-id mismatch, and files that
// are missing, not ELF, truncated or corrupt.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/symbolize/symbolizer.h"
#include "tests/symbolize/symbolize_testlib.h"
#include "tests/symbolize/symbolizer_test_util.h"

namespace memstep::symbolize {
namespace {

using ::memstep::symbolize::testing::Basename;
using ::memstep::symbolize::testing::Capture;
using ::memstep::symbolize::testing::HaveTool;
using ::memstep::symbolize::testing::Hex;
using ::memstep::symbolize::testing::Ip;
using ::memstep::symbolize::testing::kLibSource;
using ::memstep::symbolize::testing::NoDebugRoots;
using ::memstep::symbolize::testing::ReadFile;
using ::memstep::symbolize::testing::Shell;
using ::memstep::symbolize::testing::SymbolizerTest;
using ::memstep::symbolize::testing::WriteFile;
using ::testing::SizeIs;

TEST_F(SymbolizerTest, StrippedCopyFallsBackToSymbolTable) {
  ASSERT_TRUE(HaveTool("objcopy")) << "objcopy not installed (binutils: scripts/install-deps.sh)";
  Module module = LibModule();
  const std::string stripped = TempPath("stripped-debug.so");
  ASSERT_EQ(Shell("objcopy --strip-debug '" + module.path + "' '" + stripped + "'"), 0);
  Capture plain;
  Capture inl;
  memstep_symtest::OuterNamespaced(&plain);
  memstep_symtest::CallsInlined(&inl);
  module.path = stripped;  // same build-id: strip keeps the note
  Symbolizer symbolizer(NoDebugRoots());
  auto frames = symbolizer.Symbolize(module, Ip(plain));
  ASSERT_THAT(frames, SizeIs(1));
  EXPECT_EQ(frames[0].function, "memstep_symtest::OuterNamespaced(memstep_symtest::Capture*)");
  EXPECT_EQ(frames[0].file, "");
  EXPECT_EQ(frames[0].line, 0);
  // Without DWARF the inline chain is gone: only the out-of-line function.
  frames = symbolizer.Symbolize(module, Ip(inl));
  ASSERT_THAT(frames, SizeIs(1));
  EXPECT_EQ(frames[0].function, "memstep_symtest::CallsInlined(memstep_symtest::Capture*)");
  EXPECT_EQ(frames[0].line, 0);
}

TEST_F(SymbolizerTest, FullyStrippedCopyUsesDynsym) {
  ASSERT_TRUE(HaveTool("objcopy")) << "objcopy not installed (binutils: scripts/install-deps.sh)";
  Module module = LibModule();
  const std::string stripped = TempPath("stripped-all.so");
  ASSERT_EQ(Shell("objcopy --strip-all '" + module.path + "' '" + stripped + "'"), 0);
  Capture c;
  memstep_symtest_plain_c(&c);
  module.path = stripped;
  Symbolizer symbolizer(NoDebugRoots());
  const auto frames = symbolizer.Symbolize(module, Ip(c));
  ASSERT_THAT(frames, SizeIs(1));
  EXPECT_EQ(frames[0].function, "memstep_symtest_plain_c");
  EXPECT_EQ(frames[0].file, "");
}

// A copy of the library stripped of .symtab whose only names beyond
// .dynsym are in a MiniDebugInfo section, built as Fedora builds them: the
// function symbols absent from .dynsym, kept in an otherwise empty debug
// file (no DWARF), xz-compressed into .gnu_debugdata of the stripped copy.
// Returns "" when a step fails.
std::string MiniDebugInfoCopy(const std::string& lib, const std::string& dir) {
  if (Shell("mkdir -p '" + dir + "'") != 0) return "";
  const std::string out = dir + "/minidebuginfo.so";
  WriteFile(dir + "/make.sh",
            "set -e\n"
            "cd \"$1\"\n"
            "nm -D --format=posix --defined-only \"$2\" | awk '{print $1}' | sort > dynsyms\n"
            "nm --format=posix --defined-only \"$2\" |\n"
            "  awk '$2 == \"T\" || $2 == \"t\" {print $1}' | sort > funcsyms\n"
            "comm -13 dynsyms funcsyms > keep_symbols\n"
            "grep -qx memstep_symtest_hidden_c keep_symbols\n"
            "objcopy --only-keep-debug \"$2\" debug\n"
            "objcopy -S --remove-section .gdb_index --remove-section .comment \\\n"
            "  --keep-symbols=keep_symbols debug mini_debuginfo\n"
            "rm -f mini_debuginfo.xz\n"
            "xz mini_debuginfo\n"
            "strip --strip-all -R .comment -o \"$3\" \"$2\"\n"
            "objcopy --add-section .gnu_debugdata=mini_debuginfo.xz \"$3\"\n");
  return Shell("sh '" + dir + "/make.sh' '" + dir + "' '" + lib + "' '" + out + "'") == 0 ? out
                                                                                          : "";
}

// True when `path` has a section named `name` (readelf -S).
bool HasSection(const std::string& path, const std::string& name) {
  return Shell("readelf -SW '" + path + "' | grep -q ' " + name + " '") == 0;
}

TEST_F(SymbolizerTest, MiniDebugInfoNamesFunctionsMissingFromDynsym) {
  for (const char* tool : {"objcopy", "nm", "strip", "xz", "readelf"}) {
    ASSERT_TRUE(HaveTool(tool)) << tool << " not installed (binutils, xz-utils)";
  }
  Module module = LibModule();
  module.path = MiniDebugInfoCopy(module.path, TempPath("minidebuginfo"));
  ASSERT_FALSE(module.path.empty());
  ASSERT_FALSE(HasSection(module.path, ".symtab"));
  ASSERT_FALSE(HasSection(module.path, ".debug_info"));
  ASSERT_TRUE(HasSection(module.path, ".gnu_debugdata"));
  Capture hidden;
  memstep_symtest_calls_hidden(&hidden);
  Capture exported;
  memstep_symtest_plain_c(&exported);
  Symbolizer symbolizer(NoDebugRoots());
  auto frames = symbolizer.Symbolize(module, Ip(hidden));
  ASSERT_THAT(frames, SizeIs(1));
  EXPECT_EQ(frames[0].function, "memstep_symtest_hidden_c");
  EXPECT_EQ(frames[0].line, 0);
  // .dynsym still names the exported ones.
  frames = symbolizer.Symbolize(module, Ip(exported));
  ASSERT_THAT(frames, SizeIs(1));
  EXPECT_EQ(frames[0].function, "memstep_symtest_plain_c");
}

// The control of the test above: without .gnu_debugdata nothing names the
// hidden function (.dynsym does not have it).
TEST_F(SymbolizerTest, FullyStrippedCopyCannotNameHiddenFunction) {
  ASSERT_TRUE(HaveTool("objcopy")) << "objcopy not installed (binutils: scripts/install-deps.sh)";
  Module module = LibModule();
  const std::string stripped = TempPath("stripped-all-hidden.so");
  ASSERT_EQ(Shell("objcopy --strip-all '" + module.path + "' '" + stripped + "'"), 0);
  module.path = stripped;
  Capture hidden;
  memstep_symtest_calls_hidden(&hidden);
  Symbolizer symbolizer(NoDebugRoots());
  const auto frames = symbolizer.Symbolize(module, Ip(hidden));
  ASSERT_THAT(frames, SizeIs(1));
  EXPECT_EQ(frames[0].function, "??");
}

std::string BuildIdPath(const std::string& root, const std::string& id) {
  std::string hex;
  for (unsigned char ch : id) {
    char b[3];
    std::snprintf(b, sizeof(b), "%02x", ch);
    hex += b;
  }
  return root + "/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug";
}

// Installs the debug info of the test library under `root` by build-id and
// returns a copy of the library without it.
std::string SplitDebugInfo(const Module& module, const std::string& root,
                           const std::string& stripped) {
  const std::string debug = BuildIdPath(root, module.build_id);
  const std::string dir = debug.substr(0, debug.rfind('/'));
  if (Shell("mkdir -p '" + dir + "'") != 0) return "";
  if (Shell("objcopy --only-keep-debug '" + module.path + "' '" + debug + "'") != 0) return "";
  if (Shell("objcopy --strip-debug '" + module.path + "' '" + stripped + "'") != 0) return "";
  return stripped;
}

TEST_F(SymbolizerTest, FindsSeparateDebugInfoByBuildId) {
  ASSERT_TRUE(HaveTool("objcopy")) << "objcopy not installed (binutils: scripts/install-deps.sh)";
  Module module = LibModule();
  const std::string root = TempPath("debug-root");
  module.path = SplitDebugInfo(module, root, TempPath("split.so"));
  ASSERT_FALSE(module.path.empty());
  Capture c;
  memstep_symtest::CallsInlined(&c);
  SymbolizerOptions options;
  options.debug_roots = {root};
  Symbolizer symbolizer(options);
  const auto frames = symbolizer.Symbolize(module, Ip(c));
  ASSERT_THAT(frames, SizeIs(2));
  EXPECT_EQ(frames[0].line, c.line);
  EXPECT_TRUE(frames[0].inlined);
  EXPECT_EQ(frames[1].line, c.outer_line);
  EXPECT_EQ(Basename(frames[1].file), kLibSource);
}

TEST_F(SymbolizerTest, FindsSeparateDebugInfoByDebuglink) {
  ASSERT_TRUE(HaveTool("objcopy")) << "objcopy not installed (binutils: scripts/install-deps.sh)";
  Module module = LibModule();
  const std::string dir = TempPath("debuglink");
  ASSERT_EQ(Shell("mkdir -p '" + dir + "/.debug'"), 0);
  const std::string debug = dir + "/.debug/lib.so.debug";
  const std::string stripped = dir + "/lib.so";
  ASSERT_EQ(Shell("objcopy --only-keep-debug '" + module.path + "' '" + debug + "'"), 0);
  ASSERT_EQ(Shell("cd '" + dir +
                  "/.debug' && objcopy --strip-debug "
                  "--add-gnu-debuglink=lib.so.debug '" +
                  module.path + "' '" + stripped + "'"),
            0);
  module.path = stripped;
  Capture c;
  memstep_symtest::CallsInlined(&c);
  Symbolizer symbolizer(NoDebugRoots());  // no build-id roots: the link only
  const auto frames = symbolizer.Symbolize(module, Ip(c));
  ASSERT_THAT(frames, SizeIs(2));
  EXPECT_EQ(frames[0].line, c.line);
  EXPECT_EQ(frames[1].line, c.outer_line);
}

TEST_F(SymbolizerTest, BuildIdMismatchIsNotTrusted) {
  Module module = LibModule();
  module.build_id.assign(module.build_id.size(), '\x5a');
  Capture c;
  memstep_symtest::OuterNamespaced(&c);
  Symbolizer symbolizer(NoDebugRoots());
  const auto frames = symbolizer.Symbolize(module, Ip(c));
  ASSERT_THAT(frames, SizeIs(1));
  EXPECT_EQ(frames[0].function, "??");
  EXPECT_EQ(frames[0].file, "");
  EXPECT_EQ(frames[0].line, 0);
  EXPECT_FALSE(frames[0].inlined);
}

TEST_F(SymbolizerTest, RebuiltFileFallsBackToDebugFileOfRecordedBuild) {
  ASSERT_TRUE(HaveTool("objcopy")) << "objcopy not installed (binutils: scripts/install-deps.sh)";
  Module module = LibModule();
  const std::string root = TempPath("debug-root-rebuilt");
  ASSERT_FALSE(SplitDebugInfo(module, root, TempPath("unused.so")).empty());
  // The path now holds another build (here: the test program itself).
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  module.path.assign(self, n);
  Capture c;
  memstep_symtest::CallsTwoLevelInlined(&c);
  SymbolizerOptions options;
  options.debug_roots = {root};
  Symbolizer symbolizer(options);
  const auto frames = symbolizer.Symbolize(module, Ip(c));
  ASSERT_THAT(frames, SizeIs(3));
  EXPECT_EQ(frames[0].line, c.line);
  EXPECT_EQ(frames[2].function, "memstep_symtest::CallsTwoLevelInlined(memstep_symtest::Capture*)");
}

TEST_F(SymbolizerTest, BadFilesDegradeToUnknown) {
  const Module lib = LibModule();
  const std::string image = ReadFile(lib.path);
  ASSERT_GT(image.size(), 8192u);
  std::vector<std::string> paths = {TempPath("does-not-exist.so"), *temp_dir_, TempPath("empty.so"),
                                    TempPath("text.so"), TempPath("garbage-elf.so")};
  WriteFile(TempPath("empty.so"), "");
  WriteFile(TempPath("text.so"), "this is not an ELF file\n");
  std::string garbage = image.substr(0, 64);  // a valid ELF header...
  garbage.append(8192, '\xff');               // ...pointing into junk
  WriteFile(TempPath("garbage-elf.so"), garbage);
  for (size_t size :
       {size_t{16}, size_t{64}, size_t{1000}, size_t{4096}, image.size() / 2, image.size() - 100}) {
    const std::string path = TempPath("truncated-" + std::to_string(size) + ".so");
    WriteFile(path, image.substr(0, size));
    paths.push_back(path);
  }
  Capture c;
  memstep_symtest::CallsInlined(&c);
  Symbolizer symbolizer(NoDebugRoots());
  for (const std::string& path : paths) {
    // With the recorded build-id and without (an old trace with none).
    for (const std::string& build_id : {lib.build_id, std::string()}) {
      SCOPED_TRACE(path + (build_id.empty() ? " (no build-id)" : ""));
      const Module module{path, build_id, lib.load_bias};
      const auto frames = symbolizer.Symbolize(module, Ip(c));
      ASSERT_FALSE(frames.empty());
      if (path.find("truncated-") == std::string::npos) {
        // Missing, a directory, empty, not ELF, or ELF pointing into junk.
        ASSERT_THAT(frames, SizeIs(1));
        EXPECT_EQ(frames[0].function, "??");
        EXPECT_EQ(frames[0].line, 0);
      }
      for (const SymbolFrame& f : frames) EXPECT_FALSE(f.function.empty());
    }
  }
  EXPECT_EQ(symbolizer.Symbolize({TempPath("does-not-exist.so"), "", 0}, 0x1234)[0].function, "??");
  EXPECT_EQ(symbolizer.Symbolize({*temp_dir_, "", 0}, 0x1234)[0].function, "??");
  EXPECT_EQ(symbolizer.Symbolize({TempPath("text.so"), "", 0}, 0x1234)[0].function, "??");
}

// Corrupt bytes anywhere in a copy of the library (deterministic seeds),
// trusted because no build-id was recorded: answers may be wrong but must
// come back. MEMSTEP_SYMBOLIZE_CORRUPT_ITERATIONS raises the count.
TEST_F(SymbolizerTest, CorruptedCopiesDoNotCrash) {
  const Module lib = LibModule();
  const std::string image = ReadFile(lib.path);
  Capture c;
  memstep_symtest::CallsTwoLevelInlined(&c);
  const char* env = std::getenv("MEMSTEP_SYMBOLIZE_CORRUPT_ITERATIONS");
  const int iterations = env != nullptr ? std::atoi(env) : 40;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int i = 0; i < iterations; ++i) {
    std::string copy = image;
    const int flips = 1 + static_cast<int>(next() % 64);
    for (int k = 0; k < flips; ++k) {
      copy[next() % copy.size()] = static_cast<char>(next());
    }
    const std::string path = TempPath("corrupt-" + std::to_string(i) + ".so");
    WriteFile(path, copy);
    Symbolizer symbolizer(NoDebugRoots());
    const Module module{path, "", lib.load_bias};
    for (uint64_t ip : {Ip(c), Ip(c) + 7, lib.load_bias + 0x1000}) {
      const auto frames = symbolizer.Symbolize(module, ip);
      ASSERT_FALSE(frames.empty());
    }
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace memstep::symbolize
