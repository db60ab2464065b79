/* Three marked steps, each leaking a block of 123456 bytes in stage "work":
 * the installed memstep must report them. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memstep/memstep.h"

static void* volatile kept[3];

int main(void) {
  for (uint64_t step = 0; step < 3; ++step) {
    MEMSTEP_STEP_BEGIN(step);
    MEMSTEP_STAGE_BEGIN("work");
    kept[step] = malloc(123456);
    memset(kept[step], 1, 123456);
    MEMSTEP_STAGE_END("work");
    MEMSTEP_STEP_END(step);
  }
  printf("consumer ok\n");
  return 0;
}
