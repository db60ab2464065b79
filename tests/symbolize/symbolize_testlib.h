// Planted facts for the symbolizer tests: a shared library built with -O2 -g
// whose functions record a return address inside themselves and the source
// line of the call that produced it, so a test can symbolize a real runtime
// address and compare with __LINE__.
//
// Contract: each entry point fills `Capture` with the return address of a
// call made from the named function (directly or from code inlined into it)
// and the __LINE__ of each call in the inline chain.

#ifndef MEMSTEP_TESTS_SYMBOLIZE_SYMBOLIZE_TESTLIB_H_
#define MEMSTEP_TESTS_SYMBOLIZE_SYMBOLIZE_TESTLIB_H_

namespace memstep_symtest {

struct Capture {
  void* return_address = nullptr;  // runtime address, after the call
  int line = 0;                    // line of the innermost call (the one recorded)
  int middle_line = 0;             // two-level inline: where the middle calls the inner
  int outer_line = 0;              // where the out-of-line function calls the helper
};

// Out of line, in a namespace: one frame, demangled name.
void OuterNamespaced(Capture* capture);
// Out of line, calling an always_inline helper: two frames.
void CallsInlined(Capture* capture);
// Out of line, calling a helper that inlines another one: three frames.
void CallsTwoLevelInlined(Capture* capture);
// Out of line, inlining a member of a class in an anonymous namespace (no
// DW_AT_linkage_name): two frames, the inner one named from DWARF scopes.
void CallsAnonymousInline(Capture* capture);
// Calls a member of a local class, which inlines InlinedHelper: two frames.
void CallsLocalClass(Capture* capture);

}  // namespace memstep_symtest

// A plain C name (nothing to demangle).
extern "C" void memstep_symtest_plain_c(memstep_symtest::Capture* capture);
// Calls memstep_symtest_hidden_c, a hidden function (absent from .dynsym),
// whose call to RecordCaller is what `capture` records.
extern "C" void memstep_symtest_calls_hidden(memstep_symtest::Capture* capture);

#endif  // MEMSTEP_TESTS_SYMBOLIZE_SYMBOLIZE_TESTLIB_H_
