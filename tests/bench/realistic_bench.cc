// realistic_bench: a CPU training loop that allocates like one. A PyTorch
// training process on CPU spends most of its time in float kernels, but it
// also makes hundreds of thousands to millions of small allocations a second
// (Python objects, tensor metadata, shape vectors, names, small temporaries)
// from many call sites and stack depths, plus a few MiB-sized tensor buffers
// per step. Each step here has that mix:
//   large   a 2 MiB batch, kLayers activations of 1 MiB (held until the end
//           of backward), kLayers gradients of 512 KiB (held to step end)
//   small   about --small allocations (default 40,000), 16 B .. 4 KiB, from
//           six NOINLINE sites reached through 1..6 dispatch frames: Python-
//           object-like 16..64 B blocks and shape vectors freed at once,
//           256 B .. 4 KiB temporaries freed after their op, tensor metadata
//           and op-name strings held until the step ends
//   compute --compute passes of float math over each op's activation slice
// Defaults: ~25-30 ms a step on one core of a 2020s x86 (about 3 s for 100
// steps), ~1.5M allocations a second, allocation a few percent of the time.
//   realistic_bench [--steps N (default 100)] [--small S (default 40000)]
//                   [--compute P (default 16)] [--leak BYTES (default 0)]
// --leak keeps BYTES per step in 512-byte blocks from one site
// (BenchLeak) for the rest of the run: a small leak, which starts memstep's
// leak hunt (docs/analysis.md), so its cost shows in the step time.
// Prints wall seconds, mean and median seconds per step, and the allocation
// rate the loop made.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "memstep/memstep.h"
#include "memstep/scoped.h"
#include "tests/bench/bench_util.h"

#define BENCH_NOINLINE __attribute__((noinline))

namespace {

constexpr int kLayers = 6;
constexpr size_t kBatchFloats = (2 << 20) / sizeof(float);
constexpr size_t kActFloats = (1 << 20) / sizeof(float);
constexpr size_t kWeightFloats = (512 << 10) / sizeof(float);
constexpr int kSmallPerOp = 10;  // small allocations one op makes, on average

int64_t g_allocs = 0;  // allocations this program asked for (all sites)

struct Rng {
  uint64_t x;
  uint64_t Next() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  }
};

// What a tensor's metadata looks like: sizes, strides, dtype, storage.
struct TensorMeta {
  int64_t sizes[8];
  int64_t strides[8];
  int32_t dtype;
  int32_t rank;
  float* storage;
  uint64_t version;
  char extra[48];
};

// Everything an op made that lives until the step ends.
struct StepHeld {
  std::vector<TensorMeta*> metas;
  std::vector<std::string*> names;
  ~StepHeld() {
    for (TensorMeta* m : metas) delete m;
    for (std::string* s : names) delete s;
  }
};

// ---- the small-allocation sites ---------------------------------------------

BENCH_NOINLINE void* NewPyObject(Rng* rng) {  // 16..64 B, dies young
  ++g_allocs;
  return malloc(16 + (rng->Next() & 0x30));
}

BENCH_NOINLINE std::vector<int64_t> MakeShape(Rng* rng) {  // 8..64 B
  ++g_allocs;
  std::vector<int64_t> shape(1 + rng->Next() % 8);
  for (size_t i = 0; i < shape.size(); ++i) shape[i] = static_cast<int64_t>(i + 2);
  return shape;
}

BENCH_NOINLINE float* NewTemp(Rng* rng) {  // 256 B .. 4 KiB scratch
  ++g_allocs;
  size_t floats = 64 + (rng->Next() & 0x3C0);
  return new float[floats]();
}

BENCH_NOINLINE TensorMeta* NewTensorMeta(const std::vector<int64_t>& shape, float* storage) {
  ++g_allocs;
  auto* m = new TensorMeta();
  m->rank = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) m->sizes[i] = shape[i];
  m->storage = storage;
  return m;
}

BENCH_NOINLINE std::string* NewOpName(int layer, int op) {  // > SSO: heap
  ++g_allocs;
  auto* s = new std::string("aten::linear_backward/layer");
  s->append(std::to_string(layer)).append("/op").append(std::to_string(op));
  return s;
}

BENCH_NOINLINE void* NewDictEntry(Rng* rng) {  // 64..128 B, dies young
  ++g_allocs;
  return malloc(64 + (rng->Next() & 0x40));
}

// The Python-side bookkeeping of one op: a few objects created and released
// (refcount drops to zero), one shape, one tensor meta and sometimes a name
// kept until the step ends.
BENCH_NOINLINE void OpBookkeeping(Rng* rng, StepHeld* held, float* storage, int layer, int op) {
  void* objs[6];
  for (void*& o : objs) o = NewPyObject(rng);
  for (void* o : objs) {
    memstep::bench::Escape(o);
    free(o);
  }
  void* entry = NewDictEntry(rng);
  memstep::bench::Escape(entry);
  std::vector<int64_t> shape = MakeShape(rng);
  held->metas.push_back(NewTensorMeta(shape, storage));
  free(entry);
  if ((op & 3) == 0) held->names.push_back(NewOpName(layer, op));
}

// Reaches OpBookkeeping through `depth` frames, like an interpreter whose
// stack depth varies from call to call.
BENCH_NOINLINE void Dispatch(int depth, Rng* rng, StepHeld* held, float* storage, int layer,
                             int op) {
  if (depth > 0) {
    Dispatch(depth - 1, rng, held, storage, layer, op);
    asm volatile("" ::: "memory");  // no tail call: keep the frame
    return;
  }
  OpBookkeeping(rng, held, storage, layer, op);
}

// One op: bookkeeping, a temporary, and `passes` float passes over `n` floats.
BENCH_NOINLINE void RunOp(Rng* rng, StepHeld* held, float* out, const float* in, const float* w,
                          size_t n, int passes, int layer, int op) {
  Dispatch(1 + static_cast<int>(rng->Next() % 6), rng, held, out, layer, op);
  float* temp = NewTemp(rng);
  for (size_t i = 0; i < n; ++i) out[i] = in[i] * w[i % kWeightFloats];
  for (int p = 1; p < passes; ++p) {
    for (size_t i = 0; i < n; ++i) {
      float x = out[i] * 0.5f + w[(i * 7) % kWeightFloats];
      out[i] = x > 0 ? x : 0.01f * x;
    }
  }
  temp[0] = out[0];
  out[0] += temp[0] * 1e-9f;
  delete[] temp;
}

// ---- the large buffers --------------------------------------------------------

BENCH_NOINLINE std::unique_ptr<float[]> NewBuffer(size_t floats) {
  ++g_allocs;
  return std::unique_ptr<float[]>(new float[floats]);
}

BENCH_NOINLINE std::unique_ptr<float[]> LoadBatch(uint64_t step) {
  auto batch = NewBuffer(kBatchFloats);
  for (size_t i = 0; i < kBatchFloats; ++i) {
    batch[i] = static_cast<float>((i * 31 + step) % 255) / 255.0f;
  }
  return batch;
}

struct Model {
  std::vector<std::unique_ptr<float[]>> weights;
  std::unique_ptr<float[]> momentum;
};

BENCH_NOINLINE double TrainStep(Model* model, uint64_t step, int small, int passes, Rng* rng) {
  StepHeld held;
  const int ops_per_layer = std::max(1, small / (2 * kLayers * kSmallPerOp));
  std::unique_ptr<float[]> batch;
  {
    memstep::ScopedStage stage("data");
    batch = LoadBatch(step);
  }
  std::vector<std::unique_ptr<float[]>> acts;
  {
    memstep::ScopedStage stage("forward");
    const float* in = batch.get();
    for (int l = 0; l < kLayers; ++l) {
      auto out = NewBuffer(kActFloats);
      const size_t slice = kActFloats / ops_per_layer;
      for (int op = 0; op < ops_per_layer; ++op) {
        size_t off = op * slice;
        RunOp(rng, &held, out.get() + off, in + off, model->weights[l].get(), slice, passes, l, op);
      }
      in = out.get();
      acts.push_back(std::move(out));
    }
  }
  std::vector<std::unique_ptr<float[]>> grads;
  {
    memstep::ScopedStage stage("backward");
    for (int l = kLayers - 1; l >= 0; --l) {
      auto g = NewBuffer(kWeightFloats);
      const size_t slice = kWeightFloats / ops_per_layer;
      for (int op = 0; op < ops_per_layer; ++op) {
        size_t off = op * slice;
        RunOp(rng, &held, g.get() + off, acts[l].get() + off, model->weights[l].get(), slice,
              passes, l, op);
      }
      grads.push_back(std::move(g));
    }
    acts.clear();
  }
  double loss = 0;
  {
    memstep::ScopedStage stage("optimizer");
    for (int l = 0; l < kLayers; ++l) {
      const float* g = grads[kLayers - 1 - l].get();
      float* w = model->weights[l].get();
      float* m = model->momentum.get() + l * kWeightFloats;
      for (size_t i = 0; i < kWeightFloats; ++i) {
        m[i] = 0.9f * m[i] + 0.1f * g[i];
        w[i] -= 1e-4f * m[i];
      }
      loss += m[l];
    }
  }
  return loss + static_cast<double>(held.metas.size());
}

BENCH_NOINLINE void BenchLeak(std::vector<void*>* kept, int64_t bytes) {
  for (int64_t done = 0; done < bytes; done += 512) {
    void* p = malloc(512);
    memset(p, 0, 64);
    kept->push_back(p);
    ++g_allocs;
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memstep::bench;  // NOLINT
  const int steps = static_cast<int>(FlagInt(argc, argv, "--steps", 100));
  const int small = static_cast<int>(FlagInt(argc, argv, "--small", 40000));
  const int passes = static_cast<int>(FlagInt(argc, argv, "--compute", 16));
  const int64_t leak = FlagInt(argc, argv, "--leak", 0);
  std::vector<void*> kept;
  kept.reserve(static_cast<size_t>(steps) * static_cast<size_t>(leak / 512 + 1));
  Model model;
  for (int l = 0; l < kLayers; ++l) {
    model.weights.push_back(NewBuffer(kWeightFloats));
    for (size_t i = 0; i < kWeightFloats; ++i) model.weights[l][i] = 0.001f * (i % 97);
  }
  model.momentum = NewBuffer(kLayers * kWeightFloats);
  memset(model.momentum.get(), 0, kLayers * kWeightFloats * sizeof(float));
  Rng rng{0x9E3779B97F4A7C15ull};
  double checksum = 0;
  const int64_t allocs_before = g_allocs;
  std::vector<double> step_seconds;
  step_seconds.reserve(steps);
  const double start = NowSeconds();
  for (int step = 0; step < steps; ++step) {
    const double step_start = NowSeconds();
    MEMSTEP_STEP_BEGIN(step);
    checksum += TrainStep(&model, step, small, passes, &rng);
    if (leak > 0) BenchLeak(&kept, leak);
    MEMSTEP_STEP_END(step);
    step_seconds.push_back(NowSeconds() - step_start);
  }
  const double seconds = NowSeconds() - start;
  const double allocs = static_cast<double>(g_allocs - allocs_before);
  // The median step is robust to other work stealing the CPU for a while.
  std::sort(step_seconds.begin(), step_seconds.end());
  const double median = step_seconds.empty() ? 0 : step_seconds[step_seconds.size() / 2];
  printf(
      "RESULT name=realistic steps=%d seconds=%.4f s_per_step=%.5f median_step_s=%.5f "
      "allocs=%.0f allocs_per_s=%.0f checksum=%.1f\n",
      steps, seconds, seconds / std::max(steps, 1), median, allocs, allocs / seconds, checksum);
  return 0;
}
