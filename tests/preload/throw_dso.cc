// A C++ library that throws and catches exceptions, loaded with dlopen by a
// C program (throw_main.c): with libmemstep.so preloaded, exceptions must
// still unwind through libgcc_s (memstep dlopens libunwind RTLD_LOCAL).
#include <stdexcept>
#include <string>
#include <vector>

extern "C" __attribute__((visibility("default"))) int memstep_test_throw(int n) {
  int caught = 0;
  for (int i = 0; i < n; ++i) {
    try {
      std::vector<std::string> v(static_cast<size_t>(i % 7 + 1), std::string(100, 'x'));
      if (v.size() > 0) throw std::runtime_error("planted " + std::to_string(i));
    } catch (const std::exception& e) {
      if (e.what()[0] == 'p') ++caught;
    }
  }
  return caught;
}
