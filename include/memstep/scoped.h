// memstep public C++ helpers: scope objects that mark a training step or a
// stage for their lifetime, over the C API of memstep.h. Header-only: nothing
// to link, and (like the C API) everything is a no-op when libmemstep.so is
// not loaded.
//
// Guarantees:
//  - The step (stage) begins in the constructor and ends in the destructor,
//    also when the scope is left by an exception or an early return, so steps
//    and stages stay balanced in the trace.
//  - Nothing is allocated and nothing throws: each object holds one value and
//    makes one call of the C API at each end (memstep.h says what those cost
//    and that they are thread-safe). The current (step, stage) is
//    process-global, as in the C API.
//  - `name` is not copied: it must outlive the object (a string literal).
//  - Without libmemstep.so loaded both are no-ops (the weak symbols are null:
//    one compare each).
//  - Not copyable or movable: one object, one step or stage.
//  - Not for signal handlers (memstep.h).
//
// Usage:
//     #include "memstep/scoped.h"
//     for (uint64_t step = 0; step < n; ++step) {
//       memstep::ScopedStep s(step);
//       { memstep::ScopedStage f("forward"); forward(); }
//       { memstep::ScopedStage b("backward"); backward(); }
//     }
//
// memstep.h includes this header when compiled as C++, so programs that only
// include memstep.h keep these classes.

#ifndef MEMSTEP_INCLUDE_MEMSTEP_SCOPED_H_
#define MEMSTEP_INCLUDE_MEMSTEP_SCOPED_H_

#include <stdint.h>

#include "memstep/memstep.h"

namespace memstep {

// Marks stage `name` (memstep_stage_begin / memstep_stage_end) for the
// lifetime of the object. Stages nest up to 16 levels.
class ScopedStage {
 public:
  explicit ScopedStage(const char* name) : name_(name) { MEMSTEP_STAGE_BEGIN(name_); }
  ~ScopedStage() { MEMSTEP_STAGE_END(name_); }
  ScopedStage(const ScopedStage&) = delete;
  ScopedStage& operator=(const ScopedStage&) = delete;

 private:
  const char* name_;
};

// Marks step `step` (memstep_step_begin / memstep_step_end) for the lifetime
// of the object.
class ScopedStep {
 public:
  explicit ScopedStep(uint64_t step) : step_(step) { MEMSTEP_STEP_BEGIN(step_); }
  ~ScopedStep() { MEMSTEP_STEP_END(step_); }
  ScopedStep(const ScopedStep&) = delete;
  ScopedStep& operator=(const ScopedStep&) = delete;

 private:
  uint64_t step_;
};

}  // namespace memstep

#endif  // MEMSTEP_INCLUDE_MEMSTEP_SCOPED_H_
