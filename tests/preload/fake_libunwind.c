// A libunwind.so.8 without unw_backtrace: put first on LD_LIBRARY_PATH, it
// stands for a machine without a usable libunwind (preload.basic-no-libunwind):
// memstep must fall back to glibc's backtrace() and say so once.
int memstep_fake_libunwind = 1;
