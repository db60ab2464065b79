// A small simulation of a training loop: the bundled example (train_loop.cc)
// and the end-to-end test of the example (tests/e2e).
//
// Contract: RunTraining() allocates only through the C/C++ heap (malloc,
// new[]), marks steps and stages with the public API (memstep.h, scoped.h),
// and is deterministic for a given Config. Its memory shape, per step (sizes at the defaults):
//   data       a batch of floats, 2 MiB, freed at step end
//   forward    activations, 4 layers x 1.5 MiB, freed at the end of backward
//   backward   gradients, same size as the weights (2 MiB), freed at step end
//   optimizer  in-place update of weights and Adam state, small temporaries,
//              and RecordMetricsHistory(): the planted leak, 64 KiB per step
// plus, once: the weights (2 MiB) and the optimizer state (4 MiB, allocated at
// the first optimizer stage); a warm-up workspace (think autotuner or
// data-loader buffers) that takes 2 MiB in each of the first 10 steps and is
// kept; and a bounded cache of 1 KiB tokenizer entries, 96 per step, that
// fills to 9 MiB (step 96) and then stops growing.
// Planted classes at the defaults (tests/e2e/example_test.cc): the exact heap
// rises steeply for 10 steps, so the report's warm-up W is ~11; then
// RecordMetricsHistory is LEAK (64 KiB/step); WarmupWorkspace,
// AllocateOptimizerState (and InitModelWeights when sampled) are WARMUP_ONLY
// (their bytes were allocated before W); TokenCache::Insert is
// BOUNDED_GROWTH (it fills in the window's first half, flat in the second);
// the per-step buffers (Forward, Backward, LoadBatch) are NO_TREND; the
// process's exact heap is BOUNDED_GROWTH (160 KiB/step, then 64). Why these
// sizes: a cache that is full before step ~50 puts the exact heap's
// changepoint there and is called WARMUP_ONLY; a warm-up rise too small
// against the cache's leaves no changepoint at all; and a cache filling at
// the leak's rate makes the exact heap slow to exactly half its rate, the
// edge of the persistence test (LEAK or BOUNDED_GROWTH from run to run).
// With 200 steps the leak holds 12.5 MiB at exit, the largest live site (the
// model, the workspace and the cache are freed when the loop returns).

#ifndef MEMSTEP_EXAMPLES_TRAINING_SIM_H_
#define MEMSTEP_EXAMPLES_TRAINING_SIM_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "memstep/memstep.h"
#include "memstep/scoped.h"

#define MEMSTEP_NOINLINE __attribute__((noinline))

namespace memstep::example {

struct Config {
  int steps = 200;
  int steps_per_epoch = 50;
  int print_every = 50;  // 0: silent
  size_t leak_bytes_per_step = 64 << 10;
  int compute_passes = 1;  // float passes over each activation buffer
  size_t cache_capacity = 9 << 20;
  int cache_inserts_per_step = 96;  // 1 KiB entries
  int warmup_steps = 10;            // steps that each add a warm-up workspace buffer
  size_t warmup_bytes_per_step = 2 << 20;
};

struct Model {
  static constexpr int kLayers = 4;
  static constexpr size_t kLayerFloats = (512 << 10) / sizeof(float);  // 512 KiB
  static constexpr size_t kBatchFloats = (2 << 20) / sizeof(float);    // 2 MiB
  static constexpr size_t kActFloats = (1536 << 10) / sizeof(float);   // 1.5 MiB

  std::vector<std::unique_ptr<float[]>> weights;
  std::unique_ptr<float[]> adam_state;  // m and v for every weight
};

// Everything the planted leak keeps: one record per step, never freed.
inline std::vector<void*>& MetricsHistory() {
  static auto* history = new std::vector<void*>();
  return *history;
}

MEMSTEP_NOINLINE inline void RecordMetricsHistory(size_t bytes, float loss) {
  auto* record = static_cast<float*>(malloc(bytes));
  for (size_t i = 0; i < bytes / sizeof(float); ++i) record[i] = loss;
  MetricsHistory().push_back(record);
}

// A bounded cache (think tokenizer): fills to `capacity` bytes, then stops.
class TokenCache {
 public:
  explicit TokenCache(size_t capacity) : capacity_(capacity) {}
  ~TokenCache() {
    for (char* e : entries_) delete[] e;
  }
  MEMSTEP_NOINLINE void Insert(uint64_t key) {
    if (bytes_ + kEntryBytes > capacity_) return;
    char* entry = new char[kEntryBytes];
    memset(entry, static_cast<int>(key), kEntryBytes);
    entries_.push_back(entry);
    bytes_ += kEntryBytes;
  }

 private:
  static constexpr size_t kEntryBytes = 1024;
  size_t capacity_;
  size_t bytes_ = 0;
  std::vector<char*> entries_;
};

// Warm-up: one workspace buffer per step in the first steps, kept.
MEMSTEP_NOINLINE inline void WarmupWorkspace(std::vector<std::unique_ptr<char[]>>* workspace,
                                             size_t bytes) {
  std::unique_ptr<char[]> buffer(new char[bytes]);
  memset(buffer.get(), 1, bytes);
  workspace->push_back(std::move(buffer));
}

MEMSTEP_NOINLINE inline void InitModelWeights(Model* model) {
  for (int l = 0; l < Model::kLayers; ++l) {
    float* w = new float[Model::kLayerFloats];
    for (size_t i = 0; i < Model::kLayerFloats; ++i) w[i] = 0.001f * static_cast<float>(i % 97);
    model->weights.emplace_back(w);
  }
}

MEMSTEP_NOINLINE inline void AllocateOptimizerState(Model* model) {
  size_t n = 2 * Model::kLayers * Model::kLayerFloats;
  model->adam_state.reset(new float[n]);
  memset(model->adam_state.get(), 0, n * sizeof(float));
}

MEMSTEP_NOINLINE inline std::unique_ptr<float[]> LoadBatch(uint64_t step) {
  std::unique_ptr<float[]> batch(new float[Model::kBatchFloats]);
  for (size_t i = 0; i < Model::kBatchFloats; ++i) {
    batch[i] = static_cast<float>((i * 31 + step) % 255) / 255.0f;
  }
  return batch;
}

MEMSTEP_NOINLINE inline std::vector<std::unique_ptr<float[]>> Forward(const Model& model,
                                                                      const float* batch,
                                                                      int passes) {
  std::vector<std::unique_ptr<float[]>> acts;
  const float* in = batch;
  for (int l = 0; l < Model::kLayers; ++l) {
    std::unique_ptr<float[]> out(new float[Model::kActFloats]);
    const float* w = model.weights[l].get();
    for (size_t i = 0; i < Model::kActFloats; ++i) {
      out[i] = in[i % Model::kBatchFloats] * w[i % Model::kLayerFloats];
    }
    for (int p = 1; p < passes; ++p) {
      for (size_t i = 0; i < Model::kActFloats; ++i) {
        float x = out[i] * 0.5f + w[(i * 7) % Model::kLayerFloats];
        out[i] = x > 0 ? x : 0.01f * x;
      }
    }
    in = out.get();
    acts.push_back(std::move(out));
  }
  return acts;
}

MEMSTEP_NOINLINE inline std::vector<std::unique_ptr<float[]>> Backward(
    const std::vector<std::unique_ptr<float[]>>& acts, int passes) {
  std::vector<std::unique_ptr<float[]>> grads;
  for (int l = Model::kLayers - 1; l >= 0; --l) {
    std::unique_ptr<float[]> g(new float[Model::kLayerFloats]);
    const float* a = acts[l].get();
    for (size_t i = 0; i < Model::kLayerFloats; ++i) g[i] = a[i] * 0.1f;
    for (int p = 1; p < passes; ++p) {
      for (size_t i = 0; i < Model::kLayerFloats; ++i) g[i] += a[i + Model::kLayerFloats] * 0.01f;
    }
    grads.push_back(std::move(g));
  }
  return grads;
}

MEMSTEP_NOINLINE inline float OptimizerStep(Model* model,
                                            const std::vector<std::unique_ptr<float[]>>& grads) {
  float loss = 0;
  float* m = model->adam_state.get();
  float* v = m + Model::kLayers * Model::kLayerFloats;
  for (int l = 0; l < Model::kLayers; ++l) {
    std::vector<float> scratch(256);  // small temporary, as real optimizers have
    const float* g = grads[Model::kLayers - 1 - l].get();
    float* w = model->weights[l].get();
    size_t off = l * Model::kLayerFloats;
    for (size_t i = 0; i < Model::kLayerFloats; ++i) {
      m[off + i] = 0.9f * m[off + i] + 0.1f * g[i];
      v[off + i] = 0.999f * v[off + i] + 0.001f * g[i] * g[i];
      w[i] -= 0.001f * m[off + i];
      scratch[i % scratch.size()] += g[i];
    }
    loss += scratch[l];
  }
  return loss;
}

// Runs the loop; returns a checksum so the work cannot be optimized away.
inline double RunTraining(const Config& config) {
  Model model;
  TokenCache cache(config.cache_capacity);
  std::vector<std::unique_ptr<char[]>> workspace;
  double checksum = 0;
  InitModelWeights(&model);
  for (int step = 0; step < config.steps; ++step) {
    MEMSTEP_STEP_BEGIN(step);
    std::unique_ptr<float[]> batch;
    {
      ScopedStage stage("data");
      batch = LoadBatch(step);
      if (step < config.warmup_steps) WarmupWorkspace(&workspace, config.warmup_bytes_per_step);
      for (int t = 0; t < config.cache_inserts_per_step; ++t) {
        cache.Insert(static_cast<uint64_t>(step) * config.cache_inserts_per_step + t);
      }
    }
    std::vector<std::unique_ptr<float[]>> acts;
    {
      ScopedStage stage("forward");
      acts = Forward(model, batch.get(), config.compute_passes);
    }
    std::vector<std::unique_ptr<float[]>> grads;
    {
      ScopedStage stage("backward");
      grads = Backward(acts, config.compute_passes);
      acts.clear();
    }
    {
      ScopedStage stage("optimizer");
      if (!model.adam_state) AllocateOptimizerState(&model);
      float loss = OptimizerStep(&model, grads);
      RecordMetricsHistory(config.leak_bytes_per_step, loss);
      checksum += loss;
    }
    grads.clear();
    batch.reset();
    MEMSTEP_STEP_END(step);
    int epoch = step / config.steps_per_epoch;
    if (config.print_every > 0 && (step + 1) % config.print_every == 0) {
      printf("epoch %d step %d/%d loss %.4f leaked %zu KiB\n", epoch, step + 1, config.steps,
             checksum / (step + 1), MetricsHistory().size() * config.leak_bytes_per_step / 1024);
      fflush(stdout);
    }
  }
  return checksum;
}

}  // namespace memstep::example

#endif  // MEMSTEP_EXAMPLES_TRAINING_SIM_H_
