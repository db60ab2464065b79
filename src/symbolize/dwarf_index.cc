#include "src/symbolize/dwarf_index.h"

#include <cxxabi.h>
#include <dwarf.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace memstep::symbolize {
namespace {

// Namespaces and classes can hold function definitions (GCC nests the
// concrete DIE of a namespaced function in its DW_TAG_namespace).
constexpr int kMaxNestingDepth = 32;

bool IsContainer(int tag) {
  return tag == DW_TAG_namespace || tag == DW_TAG_class_type || tag == DW_TAG_structure_type ||
         tag == DW_TAG_union_type || tag == DW_TAG_module;
}

// Scopes that can sit between a function and the inlined code it contains.
bool IsCodeScope(int tag) {
  return tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
         tag == DW_TAG_try_block || tag == DW_TAG_catch_block || tag == DW_TAG_with_stmt;
}

bool HasCodeRange(Dwarf_Die* die) {
  return dwarf_hasattr(die, DW_AT_low_pc) || dwarf_hasattr(die, DW_AT_ranges);
}

// Appends to `chain` the inlined subroutines under `parent` containing `pc`.
// Returns whether some scope under `parent` contains `pc`.
bool Descend(Dwarf_Die* parent, Dwarf_Addr pc, int depth, std::vector<Dwarf_Die>* chain) {
  if (depth > 64) return false;  // corrupt or absurdly deep DWARF
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return false;
  do {
    const int tag = dwarf_tag(&child);
    if (!IsCodeScope(tag)) continue;
    if (HasCodeRange(&child)) {
      if (dwarf_haspc(&child, pc) <= 0) continue;
      if (tag == DW_TAG_inlined_subroutine) chain->push_back(child);
      Descend(&child, pc, depth + 1, chain);
      return true;
    }
    // A block without ranges of its own may still hold ranged scopes.
    if (Descend(&child, pc, depth + 1, chain)) return true;
  } while (dwarf_siblingof(&child, &child) == 0);
  return false;
}

const char* AttrString(Dwarf_Die* die, unsigned int name) {
  Dwarf_Attribute attr;
  if (dwarf_attr_integrate(die, name, &attr) == nullptr) return nullptr;
  return dwarf_formstring(&attr);
}

}  // namespace

std::string Demangle(const char* name) {
  if (name == nullptr) return "";
  if (name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) {
    std::free(demangled);
    return name;
  }
  std::string result(demangled);
  std::free(demangled);
  return result;
}

std::string DieLinkageName(Dwarf_Die* die) {
  const char* linkage = AttrString(die, DW_AT_linkage_name);
  if (linkage == nullptr) linkage = AttrString(die, DW_AT_MIPS_linkage_name);
  return linkage != nullptr ? Demangle(linkage) : "";
}

CuIndex::CuIndex(Dwarf_Die* cu_die) : cu_die_(*cu_die) {
  const int lang = dwarf_srclang(cu_die);
  cplusplus_ = lang == DW_LANG_C_plus_plus || lang == DW_LANG_C_plus_plus_03 ||
               lang == DW_LANG_C_plus_plus_11 || lang == DW_LANG_C_plus_plus_14;
  IndexChildren(cu_die, 0);
  std::sort(ranges_.begin(), ranges_.end(),
            [](const Range& a, const Range& b) { return a.low < b.low; });
  if (dwarf_getsrcfiles(cu_die, &files_, &file_count_) != 0) {
    files_ = nullptr;
    file_count_ = 0;
  }
}

void CuIndex::IndexChildren(Dwarf_Die* parent, int depth) {
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return;
  do {
    const int tag = dwarf_tag(&child);
    if (tag == DW_TAG_subprogram) AddSubprogram(&child);
    // Member functions of local classes (lambdas too) are defined inside
    // the class, inside the enclosing function or one of its blocks. Inlined
    // subroutines, the bulk of a function's DIEs, cannot hold definitions.
    const bool may_hold_definitions =
        IsContainer(tag) || tag == DW_TAG_subprogram || tag == DW_TAG_lexical_block;
    if (may_hold_definitions && depth < kMaxNestingDepth) {
      IndexChildren(&child, depth + 1);
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

void CuIndex::AddSubprogram(Dwarf_Die* die) {
  if (!HasCodeRange(die)) return;  // a declaration or abstract instance
  Dwarf_Addr base = 0;
  Dwarf_Addr low = 0;
  Dwarf_Addr high = 0;
  ptrdiff_t offset = 0;
  // Several ranges when GCC splits a function into hot and .cold parts.
  while ((offset = dwarf_ranges(die, offset, &base, &low, &high)) > 0) {
    if (low < high) ranges_.push_back(Range{low, high, *die});
  }
}

const Dwarf_Die* CuIndex::FindSubprogram(Dwarf_Addr pc) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), pc,
                             [](Dwarf_Addr value, const Range& r) { return value < r.low; });
  // Functions do not overlap, but look back a little in case of odd DWARF
  // (e.g. a zero-sized entry sorted just before the right one).
  for (int back = 0; back < 4 && it != ranges_.begin(); ++back) {
    --it;
    if (pc >= it->low && pc < it->high) return &it->die;
  }
  return nullptr;
}

std::vector<Dwarf_Die> CuIndex::InlineChain(const Dwarf_Die& subprogram, Dwarf_Addr pc) const {
  std::vector<Dwarf_Die> chain;
  chain.push_back(subprogram);
  Dwarf_Die root = subprogram;
  Descend(&root, pc, 0, &chain);
  return chain;
}

void CuIndex::IndexContainers(Dwarf_Die* parent, Dwarf_Off parent_end, int parent_index,
                              int depth) {
  Dwarf_Die child;
  if (dwarf_child(parent, &child) != 0) return;
  do {
    const int tag = dwarf_tag(&child);
    if (!IsContainer(tag)) continue;
    Dwarf_Die next;
    const Dwarf_Off end = dwarf_siblingof(&child, &next) == 0 ? dwarf_dieoffset(&next) : parent_end;
    const char* name = dwarf_diename(&child);
    std::string prefix = parent_index >= 0 ? containers_[parent_index].prefix : std::string();
    if (name != nullptr) {
      prefix += name;
      prefix += "::";
    } else if (tag == DW_TAG_namespace) {
      prefix += "(anonymous namespace)::";
    }
    containers_.push_back(Container{dwarf_dieoffset(&child), end, parent_index, std::move(prefix)});
    if (depth < kMaxNestingDepth) {
      IndexContainers(&child, end, static_cast<int>(containers_.size()) - 1, depth + 1);
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

std::string CuIndex::QualifiedName(Dwarf_Die* die) {
  // The DIE that carries the name: the declaration inside its class or
  // namespace, reached through the concrete and abstract instances.
  Dwarf_Die target = *die;
  for (int hops = 0; hops < 8 && !dwarf_hasattr(&target, DW_AT_name); ++hops) {
    Dwarf_Attribute attr;
    Dwarf_Die next;
    if ((dwarf_attr(&target, DW_AT_abstract_origin, &attr) == nullptr &&
         dwarf_attr(&target, DW_AT_specification, &attr) == nullptr) ||
        dwarf_formref_die(&attr, &next) == nullptr) {
      break;
    }
    target = next;
  }
  const char* name = dwarf_diename(&target);
  if (name == nullptr) return "";
  if (!cplusplus_ || target.cu != cu_die_.cu) return name;
  if (!containers_built_) {
    containers_built_ = true;
    IndexContainers(&cu_die_, ~Dwarf_Off{0}, -1, 0);
  }
  const Dwarf_Off offset = dwarf_dieoffset(&target);
  auto it = std::upper_bound(containers_.begin(), containers_.end(), offset,
                             [](Dwarf_Off value, const Container& c) { return value < c.start; });
  if (it == containers_.begin()) return name;
  // The last container starting before the DIE, or one of its ancestors.
  int index = static_cast<int>(it - containers_.begin()) - 1;
  while (index >= 0 && offset >= containers_[index].end) {
    index = containers_[index].parent;
  }
  return index >= 0 ? containers_[index].prefix + name : name;
}

std::string CuIndex::FileName(uint64_t index) const {
  if (files_ == nullptr || index >= file_count_) return "";
  const char* name = dwarf_filesrc(files_, index, nullptr, nullptr);
  return name != nullptr ? name : "";
}

}  // namespace memstep::symbolize
