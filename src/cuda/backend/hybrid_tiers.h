// The CUDA tiers of the MoE step (engine/moe_tiers.h): what engine/moe_step.h
// drives for HybridMoe::run, one object per layer step. Route read-back;
// slots pointed in the slot table; the stream tier's copies on the copy
// stream (transit slots waited for until their last reader ran); the device
// tier's waves (gather -> gate/up -> SwiGLU -> down -> scatter, per wave, on
// the compute stream); the host tier's rows from CpuExpertExecutor, uploaded
// and scattered; the combine. The sequence and the tables are the engine's,
// every decision the StepScheduler's: nothing here chooses.
//
// CUDA-only; include it only from src/cuda/backend/hybrid_*.cpp.
#pragma once
#include "cuda/backend/hybrid_moe_impl.h"
#include "engine/moe_step.h"
#include "engine/moe_tiers.h"

namespace ms {

class HybridTiers final : public MoeTiers {
 public:
  // One layer step's device inputs (HybridMoe::run's arguments).
  struct Inputs {
    const float* x = nullptr;
    const cuda::Q8Act* x_q8 = nullptr;
    const int32_t* ids = nullptr;
    const float* weights = nullptr;
    float* h = nullptr;
    const HybridPrediction* pred = nullptr;  // null: none (or prefetch off)
  };
  HybridTiers(HybridMoe::Impl& m, const Inputs& in) : m_(m), in_(in) {}

  MoeRoutes fetch_routes(int layer, int n, bool with_input) override;
  void planned(int layer, const LayerSchedule& s, const MoeStepTables& t) override;
  void point(int layer, int expert, SlotRef where) override;
  bool decode_kernels_take(int layer) const override;
  void decode_on_device(int layer, const StepPlan& sp, const std::vector<size_t>& experts, bool copies) override;
  void fetch_input(int layer, int n) override;
  void upload_tables(int layer, const MoeStepTables& t) override;
  void begin_waves(int layer, bool any_copy) override;
  void copy_wave(int layer, const StepPlan& sp, const std::vector<size_t>& wave, size_t index) override;
  void compute_wave(int layer, int n, const StepPlan& sp, const std::vector<size_t>& wave, const MoeWave& w) override;
  void end_waves(int layer, bool any_copy) override;
  void stage_decode(int layer, const DecodeStage& ds) override;
  void stage_prompt(const PromptStage& ps) override;
  void enqueued(int layer) override;
  void compute_share(const MoeShare& s) override;
  void combine(int layer, int n) override;

 private:
  HybridMoe::Impl& m_;
  Inputs in_;
  bool input_fetched_ = false;  // the FFN input came back with the routes
  int32_t bank_ = -1;           // the decode staging bank this step reads (-1: none)
  hybrid_detail::Clock::time_point t_plan_;
};

}  // namespace ms
