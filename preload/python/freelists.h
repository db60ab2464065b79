// CPython 3.10 to 3.12's free lists, and 3.13's list of dicts' key tables,
// bypassed during leak hunts (freelists.cc).

#ifndef MEMSTEP_PRELOAD_PYTHON_FREELISTS_H_
#define MEMSTEP_PRELOAD_PYTHON_FREELISTS_H_

#include <stdint.h>

namespace memstep::preload {

// Finds and checks the main interpreter's free lists (GIL held, before the
// pymalloc hooks are installed). nullptr when found, or why not (a sentence).
const char* FreeListsFind();

// Follows the host leak hunt: the free lists are bypassed while one runs and
// memstep records, and in use again after (GIL held, outside memstep's
// guard: bypassing frees the lists' objects through the pymalloc hooks).
// The bypass begins at a step's first allocation (FreeListsStep, called when
// g_fl_step is neither 0 nor the current step + 1), while the lists still
// hold what the last step left in them: a sample that finds the hunt running
// and the bypass off arms it (g_fl_step = that step + 1); FreeListsStep
// disarms it (0). FreeListsSync (after samples) also ends the bypass, or
// makes it whole again after a full collection.
extern uint64_t g_fl_step;
void FreeListsStep();
void FreeListsSync();

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_PYTHON_FREELISTS_H_
