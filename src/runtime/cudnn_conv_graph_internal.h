// Internals of the graph-API convolutions (cudnn_conv_graph.h) shared by its two translation
// units, the only ones besides attention's that include cudnn-frontend
// (cmake/cudnn_frontend.cmake): cudnn_conv_graph_describe.cc describes a key's cuDNN graph,
// cudnn_conv_graph.cc chooses, caches and runs its plans.
#ifndef REPRISE_SRC_RUNTIME_CUDNN_CONV_GRAPH_INTERNAL_H_
#define REPRISE_SRC_RUNTIME_CUDNN_CONV_GRAPH_INTERNAL_H_

#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "src/runtime/cudnn_conv_graph.h"

namespace reprise::runtime {

namespace fe = ::cudnn_frontend;

struct CudnnConvGraph::Plan {
  // Built; execute_plan_at_index() is thread-safe once the plan has run (the warm-up).
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t index = 0;  // The chosen plan's index in the graph's list.
  int64_t workspace_bytes = 0;
  std::string engine;  // cuDNN's name of the chosen engine and knobs.
  bool deterministic = false;
  std::string chosen_by;  // "" (heuristics) or "measured <ms> ms of <n>" (+ " (record)").
};

namespace conv_graph {

// Tensor ids of the variant pack.
enum Uid : int64_t { kA = 1, kB, kOut, kScale, kBias, kSum, kSqSum, kAcc };

struct Key {
  ConvKind kind;
  ConvShape shape;
  ConvFusion fusion;
  bool allow_tf32;
  bool deterministic;
  size_t workspace_limit;
  std::string device;
  bool measured;

  bool operator==(const Key& other) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const Key& key) {
    return H::combine(std::move(h), key.kind, key.shape, key.fusion.scale_bias_relu_input,
                      key.fusion.output_stats, key.fusion.add_to_output, key.allow_tf32,
                      key.deterministic, key.workspace_limit, key.device, key.measured);
  }
};

// "<context>: cudnn-frontend <step> failed for <what>: <message>": Unimplemented where no engine
// takes the graph, Internal otherwise (cudnn_conv_graph_describe.cc says which codes are which).
absl::Status FrontendStatus(fe::error_t error, absl::string_view step, absl::string_view what,
                            absl::string_view context);

// "conv <kind>[ <fusion>] <shape>", for messages.
std::string What(const Key& key);

// The graph of one key, not built yet.
std::shared_ptr<fe::graph::Graph> DescribeGraph(const Key& key);

// Engines whose numerical notes the key's options rule out.
std::vector<fe::NumericalNote_t> BarredNotes(const Key& key);

}  // namespace conv_graph
}  // namespace reprise::runtime

#endif  // REPRISE_SRC_RUNTIME_CUDNN_CONV_GRAPH_INTERNAL_H_
