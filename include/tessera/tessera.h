// tessera: a dataflow runtime in the spirit of TensorFlow 1's engine. The umbrella header.
//
//   #include <tessera/tessera.h>
//   tessera::Graph g;
//   auto c = tessera::ops::add(tessera::ops::constant(g, 1), tessera::ops::constant(g, 2));
//   tessera::Session s(g);
//   int v = s.run(c).scalar<int32_t>();   // 3
#pragma once

#include "tessera/cluster.h"
#include "tessera/config.h"
#include "tessera/control_flow.h"
#include "tessera/device.h"
#include "tessera/device_setter.h"
#include "tessera/errors.h"
#include "tessera/gradients.h"
#include "tessera/graph.h"
#include "tessera/input.h"
#include "tessera/layers.h"
#include "tessera/learning_rate_decay.h"
#include "tessera/losses.h"
#include "tessera/metrics.h"
#include "tessera/moving_averages.h"
#include "tessera/monitored_session.h"
#include "tessera/ops.h"
#include "tessera/optimizer.h"
#include "tessera/queue.h"
#include "tessera/saver.h"
#include "tessera/server.h"
#include "tessera/server_process.h"
#include "tessera/session.h"
#include "tessera/session_run_hook.h"
#include "tessera/tensor.h"
#include "tessera/tensor_array.h"
#include "tessera/rnn.h"
#include "tessera/train.h"
#include "tessera/variable.h"
#include "tessera/variable_scope.h"
#include "tessera/accumulator.h"
#include "tessera/sync_replicas_optimizer.h"
#include "tessera/summary.h"
