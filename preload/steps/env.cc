#include "preload/steps/env.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "preload/core/base.h"
#include "preload/core/fds.h"
#include "preload/steps/config.h"

namespace memstep::preload {

namespace {

bool Quiet() {
  const char* q = getenv("MEMSTEP_QUIET");
  return q != nullptr && q[0] != '\0' && q[0] != '0';
}

template <typename Parse>
bool Read(const char* name, uint64_t* out, Parse parse, const char* what) {
  const char* v = getenv(name);
  if (v == nullptr || v[0] == '\0') return false;
  if (parse(v, out)) return true;
  EnvReject(name, v, what);
  return false;
}

}  // namespace

void EnvReject(const char* name, const char* value, const char* what) {
  if (Quiet()) return;
  char line[512];
  int n = snprintf(line, sizeof(line), "memstep: %s='%.200s' is not %s; using the default\n", name,
                   value, what);
  if (n > 0) SayOnStderr(line, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1);
}

bool EnvCount(const char* name, uint64_t* out) {
  return Read(name, out, ParseU64, "a non-negative integer");
}

bool EnvSize(const char* name, uint64_t* out) {
  return Read(name, out, ParseSize, "a size (4096, 512KiB, 1.5GiB)");
}

bool EnvSeconds(const char* name, uint64_t* out) {
  return Read(name, out, ParseSeconds, "a duration in seconds (10, 0.05, 2s)");
}

}  // namespace memstep::preload
