// Hooks into a training loop run by train::MonitoredTrainingSession, as TF1's SessionRunHook.
//
//   struct PrintLoss : train::SessionRunHook::Impl {
//     Output loss;
//     explicit PrintLoss(Output l) : loss(l) {}
//     std::vector<Output> before_run() override { return {loss}; }     // fetched with the run
//     void after_run(const std::vector<Tensor>& v, bool& stop) override { std::cout << v[0]; }
//   };
//   opts.hooks.push_back(train::SessionRunHook(std::make_shared<PrintLoss>(loss)));
//
// The monitored session calls, in order: begin() once before its session is made (the last chance
// to add ops to the graph); after_create_session(session) each time a session is made or remade
// (after initialization or restore); before_run() and after_run(values, request_stop) around
// every run, where `values` are the before_run outputs' values fetched by that same run and
// setting `request_stop` makes should_stop() true; end(session) at close when no error ended the
// loop. A hook's calls come from the thread that runs the monitored session.
#pragma once

#include <memory>
#include <vector>

#include "tessera/graph.h"
#include "tessera/session.h"
#include "tessera/tensor.h"

namespace tessera::train {

class SessionRunHook {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual void begin() {}
    virtual void after_create_session(Session&) {}
    virtual std::vector<Output> before_run() { return {}; }
    virtual void after_run(const std::vector<Tensor>& values, bool& request_stop) {
      (void)values;
      (void)request_stop;
    }
    virtual void end(Session&) {}
  };

  SessionRunHook() = default;
  explicit SessionRunHook(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  bool is_null() const { return impl_ == nullptr; }
  // The hook's implementation (shared by copies); null for a default-constructed hook.
  Impl* impl() const { return impl_.get(); }

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessera::train
