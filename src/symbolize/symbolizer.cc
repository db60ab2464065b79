#include "src/symbolize/symbolizer.h"

#include <dwarf.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

#include "src/symbolize/dwarf_index.h"

namespace memstep::symbolize {
namespace {

constexpr char kUnknown[] = "??";

struct ElfSymbol {
  uint64_t address;
  uint64_t end;  // exclusive; a zero-sized symbol extends to its section's end
  bool sized;
  bool global;
  const char* name;  // owned by libelf, valid while the Dwfl is
};

// End address of section `shndx` of `elf`, adjusted by `bias`, or 0.
uint64_t SectionEnd(Elf* elf, GElf_Word shndx, Dwarf_Addr bias) {
  if (elf == nullptr || shndx == SHN_UNDEF || shndx >= SHN_LORESERVE) return 0;
  Elf_Scn* scn = elf_getscn(elf, shndx);
  GElf_Shdr shdr;
  if (scn == nullptr || gelf_getshdr(scn, &shdr) == nullptr) return 0;
  return shdr.sh_addr + shdr.sh_size + bias;
}

std::string HexOf(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 15]);
  }
  return hex;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

struct Symbolizer::Impl {
  // One opened ELF file (or its separate debug file), with its caches.
  struct ModuleState {
    ModuleState() = default;
    ModuleState(const ModuleState&) = delete;
    ModuleState& operator=(const ModuleState&) = delete;
    ~ModuleState() {
      cus.clear();  // CuIndex points into the Dwfl: drop it first
      if (dwfl != nullptr) dwfl_end(dwfl);
    }

    Dwfl* dwfl = nullptr;
    Dwfl_Module* mod = nullptr;  // nullptr: the file is unusable, answer "??"
    bool symtab_built = false;
    std::vector<ElfSymbol> symtab;  // functions, sorted by address
    std::unordered_map<Dwarf_Off, std::unique_ptr<CuIndex>> cus;
    // CuIndex::QualifiedName by DIE offset, for functions without a linkage name.
    std::unordered_map<Dwarf_Off, std::string> qualified_names;
    // Keyed by the ELF virtual address looked up (after the ip - 1 step).
    std::unordered_map<uint64_t, std::vector<SymbolFrame>> addresses;
  };

  explicit Impl(SymbolizerOptions opts) : options(std::move(opts)) {
    // "" and ".debug": the module's own directory and its .debug/ subdir,
    // for .gnu_debuglink; absolute roots: build-id and mirrored paths.
    debuginfo_path = ":.debug";
    for (const std::string& root : options.debug_roots) {
      if (!root.empty() && root[0] == '/') debuginfo_path += ":" + root;
    }
    debuginfo_path_ptr = debuginfo_path.data();
    callbacks.find_elf = dwfl_build_id_find_elf;
    callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
    callbacks.section_address = dwfl_offline_section_address;
    callbacks.debuginfo_path = &debuginfo_path_ptr;
  }

  ModuleState* GetModule(const Module& module);
  std::unique_ptr<ModuleState> Open(const Module& module);
  bool TryReport(ModuleState* state, const std::string& path, const std::string& build_id);
  std::vector<SymbolFrame> Compute(ModuleState* state, uint64_t pc);
  std::string SymtabName(ModuleState* state, uint64_t pc);
  std::string FunctionName(ModuleState* state, CuIndex* cu, Dwarf_Die* die, bool inlined,
                           uint64_t pc);
  CuIndex* GetCu(ModuleState* state, Dwarf_Die* cu_die);

  SymbolizerOptions options;
  std::string debuginfo_path;
  char* debuginfo_path_ptr = nullptr;
  Dwfl_Callbacks callbacks = {};
  // Keyed by path + '\0' + build-id.
  std::unordered_map<std::string, std::unique_ptr<ModuleState>> modules;
  std::string key_scratch;
  SymbolizerStats stats;
};

Symbolizer::Impl::ModuleState* Symbolizer::Impl::GetModule(const Module& module) {
  key_scratch.assign(module.path);
  key_scratch.push_back('\0');
  key_scratch.append(module.build_id);
  auto it = modules.find(key_scratch);
  if (it != modules.end()) return it->second.get();
  ++stats.modules_opened;
  std::unique_ptr<ModuleState> state = Open(module);
  ModuleState* raw = state.get();
  modules.emplace(key_scratch, std::move(state));
  return raw;
}

std::unique_ptr<Symbolizer::Impl::ModuleState> Symbolizer::Impl::Open(const Module& module) {
  auto state = std::make_unique<ModuleState>();
  if (TryReport(state.get(), module.path, module.build_id)) return state;
  // Missing, unreadable or rebuilt since the trace was recorded: the debug
  // file with the recorded build-id (it has .symtab and DWARF) still fits.
  if (module.build_id.size() >= 2) {
    const std::string hex = HexOf(module.build_id);
    for (const std::string& root : options.debug_roots) {
      const std::string path =
          root + "/.build-id/" + hex.substr(0, 2) + "/" + hex.substr(2) + ".debug";
      if (TryReport(state.get(), path, module.build_id)) return state;
    }
  }
  return state;
}

bool Symbolizer::Impl::TryReport(ModuleState* state, const std::string& path,
                                 const std::string& build_id) {
  if (!IsRegularFile(path)) return false;  // also refuses FIFOs and devices
  Dwfl* dwfl = dwfl_begin(&callbacks);
  if (dwfl == nullptr) return false;
  dwfl_report_begin(dwfl);
  // Base 0: addresses inside this Dwfl are ELF virtual addresses; the load
  // bias is subtracted before each lookup.
  Dwfl_Module* mod = dwfl_report_elf(dwfl, path.c_str(), path.c_str(), -1, 0, true);
  dwfl_report_end(dwfl, nullptr, nullptr);
  if (mod != nullptr && !build_id.empty()) {
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    const int len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len <= 0 || static_cast<size_t>(len) != build_id.size() ||
        std::memcmp(bits, build_id.data(), build_id.size()) != 0) {
      mod = nullptr;  // a different build: its addresses mean nothing
    }
  }
  if (mod == nullptr) {
    dwfl_end(dwfl);
    return false;
  }
  state->dwfl = dwfl;
  state->mod = mod;
  return true;
}

std::string Symbolizer::Impl::SymtabName(ModuleState* state, uint64_t pc) {
  if (!state->symtab_built) {
    state->symtab_built = true;
    const int count = dwfl_module_getsymtab(state->mod);
    for (int i = 0; i < count; ++i) {
      GElf_Sym sym;
      GElf_Addr address = 0;
      GElf_Word shndx = 0;
      Elf* elf = nullptr;
      Dwarf_Addr bias = 0;
      const char* name =
          dwfl_module_getsym_info(state->mod, i, &sym, &address, &shndx, &elf, &bias);
      if (name == nullptr || name[0] == '\0' || shndx == SHN_UNDEF) continue;
      const int type = GELF_ST_TYPE(sym.st_info);
      if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
      const bool sized = sym.st_size > 0;
      const uint64_t end = sized ? address + sym.st_size : SectionEnd(elf, shndx, bias);
      if (end <= address) continue;
      state->symtab.push_back(
          ElfSymbol{address, end, sized, GELF_ST_BIND(sym.st_info) != STB_LOCAL, name});
    }
    auto& syms = state->symtab;
    // At one address prefer the sized, then the global symbol (an alias).
    std::sort(syms.begin(), syms.end(), [](const ElfSymbol& a, const ElfSymbol& b) {
      if (a.address != b.address) return a.address < b.address;
      if (a.sized != b.sized) return a.sized;
      return a.global > b.global;
    });
    syms.erase(
        std::unique(syms.begin(), syms.end(),
                    [](const ElfSymbol& a, const ElfSymbol& b) { return a.address == b.address; }),
        syms.end());
  }
  const auto& syms = state->symtab;
  auto it = std::upper_bound(syms.begin(), syms.end(), pc,
                             [](uint64_t value, const ElfSymbol& s) { return value < s.address; });
  if (it == syms.begin()) return kUnknown;
  --it;
  // A zero-sized symbol (hand-written assembly, e.g. _init) covers up to
  // the next symbol, within its section (so not the .plt that follows).
  if (pc >= it->end) return kUnknown;
  return Demangle(it->name);
}

CuIndex* Symbolizer::Impl::GetCu(ModuleState* state, Dwarf_Die* cu_die) {
  const Dwarf_Off offset = dwarf_dieoffset(cu_die);
  auto it = state->cus.find(offset);
  if (it != state->cus.end()) return it->second.get();
  auto index = std::make_unique<CuIndex>(cu_die);
  CuIndex* raw = index.get();
  state->cus.emplace(offset, std::move(index));
  return raw;
}

std::string Symbolizer::Impl::FunctionName(ModuleState* state, CuIndex* cu, Dwarf_Die* die,
                                           bool inlined, uint64_t pc) {
  std::string name = DieLinkageName(die);
  if (!name.empty()) return name;
  if (!inlined) {
    // The ELF symbol has the full mangled name even when DWARF has none.
    // Drop GCC's clone suffixes (" [clone .cold]", " [clone .constprop.0]"):
    // they split one source function into several names.
    name = SymtabName(state, pc);
    const size_t clone = name.find(" [clone ");
    if (clone != std::string::npos) name.resize(clone);
    if (name != kUnknown) return name;
  }
  const Dwarf_Off offset = dwarf_dieoffset(die);
  auto it = state->qualified_names.find(offset);
  if (it == state->qualified_names.end()) {
    it = state->qualified_names.emplace(offset, cu->QualifiedName(die)).first;
  }
  return it->second.empty() ? kUnknown : it->second;
}

std::vector<SymbolFrame> Symbolizer::Impl::Compute(ModuleState* state, uint64_t pc) {
  // The innermost position comes from the line table.
  std::string file;
  int line = 0;
  if (Dwfl_Line* row = dwfl_module_getsrc(state->mod, pc)) {
    const char* src = dwfl_lineinfo(row, nullptr, &line, nullptr, nullptr, nullptr);
    if (src != nullptr) file = src;
  }

  std::vector<Dwarf_Die> chain;
  CuIndex* cu = nullptr;
  Dwarf_Addr bias = 0;
  if (Dwarf_Die* cu_die = dwfl_module_addrdie(state->mod, pc, &bias)) {
    cu = GetCu(state, cu_die);
    if (const Dwarf_Die* sub = cu->FindSubprogram(pc - bias)) {
      chain = cu->InlineChain(*sub, pc - bias);
    }
  }

  std::vector<SymbolFrame> frames;
  if (chain.empty()) {
    frames.push_back(SymbolFrame{SymtabName(state, pc), file, line, false});
    return frames;
  }
  // chain: subprogram, then inlined subroutines, outermost first. Frame k
  // (innermost first) is at the line table's position for the innermost
  // DIE, else at the call site recorded on the DIE inlined into it.
  frames.reserve(chain.size());
  for (size_t i = chain.size(); i-- > 0;) {
    SymbolFrame frame;
    frame.function = FunctionName(state, cu, &chain[i], i > 0, pc);
    frame.inlined = i > 0;
    if (i + 1 == chain.size()) {
      frame.file = file;
      frame.line = line;
    } else {
      Dwarf_Die* callee = &chain[i + 1];
      Dwarf_Attribute attr;
      Dwarf_Word value = 0;
      if (dwarf_attr(callee, DW_AT_call_file, &attr) != nullptr &&
          dwarf_formudata(&attr, &value) == 0) {
        frame.file = cu->FileName(value);
      }
      if (dwarf_attr(callee, DW_AT_call_line, &attr) != nullptr &&
          dwarf_formudata(&attr, &value) == 0) {
        frame.line = static_cast<int>(value);
      }
    }
    frames.push_back(std::move(frame));
  }
  return frames;
}

Symbolizer::Symbolizer() : Symbolizer(SymbolizerOptions{}) {}

Symbolizer::Symbolizer(SymbolizerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

Symbolizer::~Symbolizer() = default;

std::vector<SymbolFrame> Symbolizer::Symbolize(const Module& module, uint64_t ip,
                                               bool is_return_address) {
  ++impl_->stats.lookups;
  Impl::ModuleState* state = impl_->GetModule(module);
  if (state->mod == nullptr) {
    return {SymbolFrame{kUnknown, "", 0, false}};
  }
  // The return address is after the call; ip - 1 is inside it.
  const uint64_t pc = ip - module.load_bias - (is_return_address ? 1 : 0);
  auto it = state->addresses.find(pc);
  if (it != state->addresses.end()) {
    ++impl_->stats.cache_hits;
    return it->second;
  }
  std::vector<SymbolFrame> frames = impl_->Compute(state, pc);
  state->addresses.emplace(pc, frames);
  return frames;
}

SymbolizerStats Symbolizer::stats() const { return impl_->stats; }

}  // namespace memstep::symbolize
