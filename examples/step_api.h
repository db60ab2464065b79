// Step/stage markers for the bundled example and the planted test programs.
//
// Contract: every function here is safe to call whether or not libmemstep.so
// is loaded: memstep.h declares the memstep_* symbols weak, so under
// LD_PRELOAD they bind to the library and without it they stay null and these
// wrappers do nothing. Not for signal handlers (memstep.h).

#ifndef MEMSTEP_EXAMPLES_STEP_API_H_
#define MEMSTEP_EXAMPLES_STEP_API_H_

#include <cstdint>

#include "memstep/memstep.h"

namespace memstep::example {

inline void StepBegin(uint64_t step) { MEMSTEP_STEP_BEGIN(step); }
inline void StepEnd(uint64_t step) { MEMSTEP_STEP_END(step); }
inline void StageBegin(const char* name) { MEMSTEP_STAGE_BEGIN(name); }
inline void StageEnd(const char* name) { MEMSTEP_STAGE_END(name); }
inline void Counter(const char* name, int64_t value) { MEMSTEP_COUNTER(name, value); }

// Marks a stage for the lifetime of the object (the public header's).
using ScopedStage = ::memstep::ScopedStage;

}  // namespace memstep::example

#endif  // MEMSTEP_EXAMPLES_STEP_API_H_
