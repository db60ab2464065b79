/* An empty shared library standing in for libmemstep.so in cli_test. */
int memstep_fake_preload_marker = 1;
