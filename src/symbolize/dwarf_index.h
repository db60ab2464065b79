// Per-compilation-unit index of function DIEs, so that finding the function
// and the inline chain at an address does not re-walk the whole CU (libdw's
// dwarf_getscopes does, which costs milliseconds per address in a large CU).
//
// Contract:
//  - Built once per CU from its DIE (one walk of the DIEs that can hold
//    function definitions: namespaces, classes, functions and their blocks,
//    not inlined subroutines), then each lookup is a binary search plus a
//    walk down one function's scopes.
//  - Thread-compatible; QualifiedName fills a lazy index (not const).
//  - Holds Dwarf_Die values that point into the Dwarf of the module: it must
//    not outlive the Dwfl that owns that Dwarf.
//  - Never throws; corrupt DWARF yields fewer or no matches.
//
// Example: for `void Outer() { Helper(); }` with `Helper` always_inline and
// containing `Leaf()` inlined too, InlineChain(pc in Leaf's code) returns
// {Outer's subprogram, Helper's inlined_subroutine, Leaf's
// inlined_subroutine}: outermost first. The caller pairs each inlined DIE
// with its DW_AT_call_file/DW_AT_call_line, the position in its parent.

#ifndef MEMSTEP_SRC_SYMBOLIZE_DWARF_INDEX_H_
#define MEMSTEP_SRC_SYMBOLIZE_DWARF_INDEX_H_

#include <elfutils/libdw.h>

#include <cstdint>
#include <string>
#include <vector>

namespace memstep::symbolize {

class CuIndex {
 public:
  // `cu_die` is the DIE of the compilation unit (from dwfl_module_addrdie).
  explicit CuIndex(Dwarf_Die* cu_die);

  // The concrete DW_TAG_subprogram whose ranges contain `pc` (a DWARF
  // address, i.e. without the module bias), or nullptr.
  const Dwarf_Die* FindSubprogram(Dwarf_Addr pc) const;

  // `subprogram` followed by the nested DW_TAG_inlined_subroutine DIEs that
  // contain `pc`, outermost first.
  std::vector<Dwarf_Die> InlineChain(const Dwarf_Die& subprogram, Dwarf_Addr pc) const;

  // The source path of the CU's file-table entry `index` (for
  // DW_AT_call_file), or "" when out of range.
  std::string FileName(uint64_t index) const;

  // DW_AT_name of the function DIE `die` (of this CU), qualified by its
  // enclosing namespaces and classes in C++ ("ns::(anonymous namespace)::
  // Class::F", no parameter types), plain in other languages or when the
  // name lives in another CU; "" if it has no name. The first call indexes
  // the CU's namespaces and classes (not function bodies) once.
  std::string QualifiedName(Dwarf_Die* die);

  size_t subprogram_count() const { return ranges_.size(); }

 private:
  struct Range {
    Dwarf_Addr low;
    Dwarf_Addr high;  // exclusive
    Dwarf_Die die;
  };

  // A namespace or class: the DIEs at offsets [start, end) are inside it.
  struct Container {
    Dwarf_Off start;
    Dwarf_Off end;
    int parent;          // index in containers_, -1 at CU level
    std::string prefix;  // "ns::Class::", this container included
  };

  void IndexChildren(Dwarf_Die* parent, int depth);
  void AddSubprogram(Dwarf_Die* die);
  void IndexContainers(Dwarf_Die* parent, Dwarf_Off parent_end, int parent_index, int depth);

  Dwarf_Die cu_die_;
  bool cplusplus_ = false;
  bool containers_built_ = false;
  std::vector<Container> containers_;  // preorder, so sorted by start

  std::vector<Range> ranges_;  // sorted by low
  Dwarf_Files* files_ = nullptr;
  size_t file_count_ = 0;
};

// The demangled DW_AT_linkage_name of a function DIE (subprogram or
// inlined_subroutine), following DW_AT_abstract_origin and
// DW_AT_specification, with its parameter types: "ns::F(int)". "" when the
// DIE has none (C functions; C++ members of local or anonymous-namespace
// classes, for which GCC omits it).
std::string DieLinkageName(Dwarf_Die* die);

// abi::__cxa_demangle, or `name` unchanged when it is not a mangled name.
std::string Demangle(const char* name);

}  // namespace memstep::symbolize

#endif  // MEMSTEP_SRC_SYMBOLIZE_DWARF_INDEX_H_
