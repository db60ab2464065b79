// Strict reading of the MEMSTEP_* environment variables.
//
// Contract: an unset or empty variable leaves the default and says nothing.
// A value that does not parse is reported once, on stderr ("memstep:
// MEMSTEP_X='abc' is not a size (...); using the default"), unless
// MEMSTEP_QUIET is set, and the default stays: the program runs on.

#ifndef MEMSTEP_PRELOAD_ENV_H_
#define MEMSTEP_PRELOAD_ENV_H_

#include <stdint.h>

namespace memstep::preload {

// A plain non-negative integer.
bool EnvCount(const char* name, uint64_t* out);
// A byte size ("4096", "512KiB", "1.5GiB"; config.h ParseSize).
bool EnvSize(const char* name, uint64_t* out);
// A duration in seconds ("10", "0.05", "2s"); *out in nanoseconds.
bool EnvSeconds(const char* name, uint64_t* out);
// Says once that `name`'s value `value` is not a `what`; the default stays.
void EnvReject(const char* name, const char* value, const char* what);

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_ENV_H_
