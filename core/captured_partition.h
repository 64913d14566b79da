// A device partition replayed from a capture of its stream work (SessionOptions::cuda_graphs; Note
// [Captured partitions] in captured_partition.cc): a CUDA graph on a GPU, one stream work item on
// the simulated accelerator; one per segment where a value leaves the partition and comes back
// (Note [Replay segments]).
//
//   auto captured = CapturedPartition::make(*part.plan, *part.device);   // null: never captured
//   CapturedPartition::Step step = captured->begin(traced);
//   options.plan = step.plan;  options.capture = step.capture;          // then run the RunState
//   captured->end(step, status);                                         // while it is alive
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/executor.h"

namespace tessera::internal {

class Recording;

// One device partition's capture and replays. Thread-safe; owned by the step plan it belongs to,
// and outlives every step of it.
class CapturedPartition {
 public:
  // Null when the partition can never be captured: a device that cannot replay work, a stateful
  // op or a resource, an output shape not fully defined, a _Recv that waits for another node, or
  // nothing but transfers.
  static std::unique_ptr<CapturedPartition> make(const Plan& plan, Device& device);
  ~CapturedPartition();
  CapturedPartition(const CapturedPartition&) = delete;
  CapturedPartition& operator=(const CapturedPartition&) = delete;

  enum class Mode { kEager, kCapture, kReplay };
  struct Step {
    Mode mode = Mode::kEager;
    const Plan* plan = nullptr;       // what the step runs: the partition's plan, or the replay plan
    StepCapture* capture = nullptr;   // kCapture: RunState::Options::capture
  };
  // How one step runs the partition: eagerly while warming up (the first step), captured on the
  // next, replayed from then on. A traced step is not captured; a step that finds another one
  // capturing or replaying runs eagerly (one replay at a time: it reuses the capture's buffers).
  Step begin(bool traced);
  // After the step, its RunState still alive (a capture's recorded work reports to it while the
  // graph is made). Must follow every begin(). A capture whose step failed is tried again on the
  // next step; one that succeeded becomes the replay; one that cannot be replayed leaves the
  // partition eager for good (`why_not()` says why).
  void end(const Step& step, const Status& status);

  bool replaying() const;
  std::string why_not() const;  // "" while it may still be (or is) replayed
  int64_t replays() const;

 private:
  class SkipKernel;
  class InputKernel;
  // Inner nodes that wait for the same _Recvs (their gate), launched as one unit.
  struct Segment {
    std::vector<int> gate;                 // plan indices of the _Recvs its nodes wait for
    std::vector<int> launches;             // what its launch launches when not yet: gates within its own
    std::unique_ptr<Device::Graph> graph;  // null: no recorded work (Identity, Reshape)
  };
  CapturedPartition(const Plan& plan, Device& device, std::vector<int> inputs);
  void make_segments();
  Status finish_capture(Recording& rec);
  void launch_once(int segment, OpKernelContext& ctx);

  const Plan& plan_;
  Device& device_;
  const std::vector<int> inputs_;  // plan indices of the _Recv nodes
  std::vector<bool> inner_;        // per plan node: neither a _Recv nor a _Send
  std::vector<int> segment_of_;    // per plan node: its index in segments_ (-1: not inner)
  std::vector<Segment> segments_;  // ordered so that a segment follows every one it reads from
  const std::size_t max_bytes_;    // the most device memory a capture may keep

  mutable std::mutex mu_;
  enum class State { kWarming, kCapturing, kReady, kNever } state_ = State::kWarming;  // guarded by mu_
  bool busy_ = false;          // guarded by mu_: a step is capturing or replaying
  std::string why_not_;        // guarded by mu_
  int64_t replays_ = 0;        // guarded by mu_
  std::unique_ptr<Recording> recording_;  // the step being captured

  // Set when state_ becomes kReady (with segments_[*].graph), then read-only.
  std::vector<Tensor> retained_;                  // every buffer the recorded work touches
  std::vector<std::vector<Tensor>> outputs_;      // per plan node: its captured outputs
  std::vector<Tensor> input_targets_;             // per inputs_ entry: where its value goes (or null)
  std::vector<std::unique_ptr<OpKernel>> kernels_;
  std::shared_ptr<const Plan> replay_plan_;
  std::mutex launch_mu_;
  std::vector<bool> launched_;  // guarded by launch_mu_: per segment, this replay has launched it
};

}  // namespace tessera::internal
