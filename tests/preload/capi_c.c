/* The public header compiles as C99 (-pedantic) and its macros are no-ops
 * when libmemstep.so is not loaded (test preload.capi_bare); under
 * LD_PRELOAD they record (the api case covers the records). */
#include <stdio.h>

#include "memstep/memstep.h"

int main(void) {
  MEMSTEP_STEP_BEGIN(1);
  MEMSTEP_STAGE_BEGIN("forward");
  MEMSTEP_COUNTER("c", -5);
  MEMSTEP_BOOST(3);
  MEMSTEP_STAGE_END("forward");
  MEMSTEP_STEP_END(1);
  puts("capi ok");
  return 0;
}
