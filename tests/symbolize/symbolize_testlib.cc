// Built with -O2 -g. Line numbers matter only through __LINE__: edit freely.
#include "tests/symbolize/symbolize_testlib.h"

#define SYMTEST_NOINLINE __attribute__((noinline, noclone))
#define SYMTEST_ALWAYS_INLINE __attribute__((always_inline)) inline

namespace memstep_symtest {

volatile int g_sink = 0;

// Records its own return address: a point inside the caller, right after
// the call. The store to g_sink after each call prevents a tail call.
SYMTEST_NOINLINE void RecordCaller(Capture* capture, int line) {
  capture->return_address = __builtin_extract_return_addr(__builtin_return_address(0));
  capture->line = line;
  asm volatile("" ::: "memory");
}

SYMTEST_NOINLINE void OuterNamespaced(Capture* capture) {
  RecordCaller(capture, __LINE__);
  g_sink = g_sink + 1;
}

SYMTEST_ALWAYS_INLINE void InlinedHelper(Capture* capture) {
  RecordCaller(capture, __LINE__);
  g_sink = g_sink + 2;
}

SYMTEST_NOINLINE void CallsInlined(Capture* capture) {
  capture->outer_line = __LINE__ + 1;
  InlinedHelper(capture);
  g_sink = g_sink + 3;
}

SYMTEST_ALWAYS_INLINE void InlinedInner(Capture* capture) {
  RecordCaller(capture, __LINE__);
  g_sink = g_sink + 4;
}

SYMTEST_ALWAYS_INLINE void InlinedMiddle(Capture* capture) {
  g_sink = g_sink + 5;
  capture->middle_line = __LINE__ + 1;
  InlinedInner(capture);
  g_sink = g_sink + 6;
}

SYMTEST_NOINLINE void CallsTwoLevelInlined(Capture* capture) {
  capture->outer_line = __LINE__ + 1;
  InlinedMiddle(capture);
  g_sink = g_sink + 7;
}

namespace {
struct Hidden {
  // A member of a class with internal linkage: GCC emits no linkage name.
  SYMTEST_ALWAYS_INLINE static void InlinedMember(Capture* capture) {
    RecordCaller(capture, __LINE__);
    g_sink = g_sink + 9;
  }
};
}  // namespace

SYMTEST_NOINLINE void CallsAnonymousInline(Capture* capture) {
  capture->outer_line = __LINE__ + 1;
  Hidden::InlinedMember(capture);
  g_sink = g_sink + 10;
}

SYMTEST_NOINLINE void CallsLocalClass(Capture* capture) {
  // GCC nests the definition of Local::Method inside this function's DIE.
  struct Local {
    SYMTEST_NOINLINE static void Method(Capture* c) {
      c->outer_line = __LINE__ + 1;
      InlinedHelper(c);
      g_sink = g_sink + 11;
    }
  };
  Local::Method(capture);
  g_sink = g_sink + 12;
}

}  // namespace memstep_symtest

extern "C" SYMTEST_NOINLINE void memstep_symtest_plain_c(memstep_symtest::Capture* capture) {
  memstep_symtest::RecordCaller(capture, __LINE__);
  memstep_symtest::g_sink = memstep_symtest::g_sink + 8;
}

// Hidden visibility: in .symtab, never in .dynsym. Only a copy stripped of
// .symtab that carries MiniDebugInfo (.gnu_debugdata) can still name it.
extern "C" __attribute__((visibility("hidden"))) SYMTEST_NOINLINE void memstep_symtest_hidden_c(
    memstep_symtest::Capture* capture) {
  memstep_symtest::RecordCaller(capture, __LINE__);
  memstep_symtest::g_sink = memstep_symtest::g_sink + 10;
}

extern "C" SYMTEST_NOINLINE void memstep_symtest_calls_hidden(memstep_symtest::Capture* capture) {
  memstep_symtest_hidden_c(capture);
  memstep_symtest::g_sink = memstep_symtest::g_sink + 11;
}
