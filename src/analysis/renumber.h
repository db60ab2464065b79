// Step renumbering for programs whose step numbers repeat.
//
// The analysis keys a step's row, its stage peaks, snapshots, alerts and
// device counters by the step number the program gave. Programs often number
// steps within each epoch (`for step, batch in enumerate(loader)`), and time
// windows (no markers yet) are numbered from 0 before the program's own steps
// take over, also from 0. Without renumbering, a repeated number would merge
// or overwrite rows of different steps.
//
// Time-window steps that ran before the program's first step marker (they
// cover start-up: imports, model build) are dropped first, so the program's
// own numbers stay as it gave them. Then, when some STEP record reuses the
// number of a step that already ended,
// every step is renumbered 0, 1, 2, ... in the order the steps began, and
// every record that names a step (ALLOC, MMAP, MREMAP, STAGE, DEV_ALLOC,
// DEV_FAIL, MEM_SNAPSHOT, ALERT, SITE_SNAPSHOT, DEV_INFO, HUNT) is moved to the new number of the
// step with that number that was current when the record was written.
// Epochs (EPOCH records) keep the program's numbers. Traces whose numbers
// never repeat are left exactly as they are.

#ifndef MEMSTEP_SRC_ANALYSIS_RENUMBER_H_
#define MEMSTEP_SRC_ANALYSIS_RENUMBER_H_

#include "src/analysis/events.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

// Returns true when `t` was renumbered.
// With `bulk`: what it did to the steps, for the bulk events that a
// streaming trace does not hold (events.h).
bool RenumberRepeatedSteps(reader::Trace* t, BulkTransform* bulk = nullptr);

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_RENUMBER_H_
