#include "capture/graph_inspect.h"

#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <queue>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/runtime/cuda_status.h"
#include "src/util/status_macros.h"

namespace reprise::capture {
namespace {

// Driver entry points for kernel names, looked up at run time like runtime::Driver()'s, so that
// nothing of ours links libcuda. cuGraphKernelNodeGetParams is the versioned symbol whose
// CUDA_KERNEL_NODE_PARAMS matches the headers we build with.
struct KernelNameApi {
  decltype(&::cuGraphKernelNodeGetParams) get_params = nullptr;
  decltype(&::cuFuncGetName) func_name = nullptr;
  decltype(&::cuKernelGetName) kernel_name = nullptr;
};

template <typename Fn>
void Resolve(const char* symbol, Fn* fn) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &address, CUDA_VERSION, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    address = nullptr;
  }
  *fn = reinterpret_cast<Fn>(address);
}

const KernelNameApi& NameApi() {
  static const KernelNameApi* const api = [] {
    auto* a = new KernelNameApi();
    Resolve("cuGraphKernelNodeGetParams", &a->get_params);
    Resolve("cuFuncGetName", &a->func_name);
    Resolve("cuKernelGetName", &a->kernel_name);
    return a;
  }();
  return *api;
}

// The kernel's function name, or empty when the driver does not say.
std::string KernelName(cudaGraphNode_t node) {
  const KernelNameApi& api = NameApi();
  if (api.get_params == nullptr) return "";
  CUDA_KERNEL_NODE_PARAMS params = {};
  if (api.get_params(node, &params) != CUDA_SUCCESS) return "";
  const char* name = nullptr;
  if (params.func != nullptr && api.func_name != nullptr) {
    if (api.func_name(&name, params.func) != CUDA_SUCCESS) name = nullptr;
  } else if (params.kern != nullptr && api.kernel_name != nullptr) {
    if (api.kernel_name(&name, params.kern) != CUDA_SUCCESS) name = nullptr;
  }
  return name == nullptr ? "" : name;
}

// Positions of the nodes in a topological order of the edges that, among the ready nodes, always
// takes the one created first; the identity when creation order is topological already.
std::vector<int> CaptureOrder(int n, const std::vector<std::pair<int, int>>& edges) {
  std::vector<std::vector<int>> successors(n);
  std::vector<int> indegree(n, 0);
  for (const auto& [from, to] : edges) {
    successors[from].push_back(to);
    ++indegree[to];
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i) {
    if (indegree[i] == 0) ready.push(i);
  }
  std::vector<int> position(n, -1);
  int next = 0;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    position[i] = next++;
    for (int s : successors[i]) {
      if (--indegree[s] == 0) ready.push(s);
    }
  }
  for (int i = 0; i < n; ++i) {
    if (position[i] < 0) position[i] = next++;  // A cycle cannot come from capture; keep going.
  }
  return position;
}

}  // namespace

absl::string_view CudaGraphNodeTypeName(cudaGraphNodeType type) {
  switch (type) {
    case cudaGraphNodeTypeKernel:
      return "kernel";
    case cudaGraphNodeTypeMemcpy:
      return "memcpy";
    case cudaGraphNodeTypeMemset:
      return "memset";
    case cudaGraphNodeTypeHost:
      return "host";
    case cudaGraphNodeTypeGraph:
      return "graph";
    case cudaGraphNodeTypeEmpty:
      return "empty";
    case cudaGraphNodeTypeWaitEvent:
      return "wait_event";
    case cudaGraphNodeTypeEventRecord:
      return "event_record";
    case cudaGraphNodeTypeExtSemaphoreSignal:
      return "ext_semaphore_signal";
    case cudaGraphNodeTypeExtSemaphoreWait:
      return "ext_semaphore_wait";
    case cudaGraphNodeTypeMemAlloc:
      return "mem_alloc";
    case cudaGraphNodeTypeMemFree:
      return "mem_free";
    case cudaGraphNodeTypeConditional:
      return "conditional";
    default:
      return "other";
  }
}

LaunchSignature SignatureOf(const LoweredLaunch& launch) {
  LaunchSignature s;
  s.node_name = launch.node_name;
  s.lane = launch.lane;
  s.is_copy = launch.node_name == "copy_inputs";
  if (!s.is_copy && launch.kernel != nullptr)
    s.kernel_names = launch.kernel->GeneratedKernelNames();
  return s;
}

absl::StatusOr<CudaGraphDump> InspectCudaGraph(
    cudaGraph_t graph, absl::Span<const LoweredLaunch> launches,
    absl::Span<const std::vector<cudaGraphNode_t>> launch_last_nodes) {
  const std::string context = "reading the captured step's CUDA graph";
  size_t num_nodes = 0;
  CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nullptr, &num_nodes), context);
  std::vector<cudaGraphNode_t> handles(num_nodes);
  if (num_nodes > 0) {
    CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, handles.data(), &num_nodes), context);
  }
  handles.resize(num_nodes);
  size_t num_edges = 0;
  CUDA_RETURN_IF_ERROR(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &num_edges), context);
  std::vector<cudaGraphNode_t> from(num_edges), to(num_edges);
  std::vector<cudaGraphEdgeData> edge_data(num_edges);
  if (num_edges > 0) {
    // Edge data is asked for too: without it, edges that carry any would fail as a lossy query.
    CUDA_RETURN_IF_ERROR(
        cudaGraphGetEdges(graph, from.data(), to.data(), edge_data.data(), &num_edges), context);
  }

  const int n = static_cast<int>(num_nodes);
  absl::flat_hash_map<cudaGraphNode_t, int> created;  // Handle -> index in creation order.
  for (int i = 0; i < n; ++i) created[handles[i]] = i;
  std::vector<std::pair<int, int>> edges;
  std::vector<bool> programmatic;  // Per edge, in the order of `edges` before sorting.
  for (size_t e = 0; e < num_edges; ++e) {
    auto f = created.find(from[e]);
    auto t = created.find(to[e]);
    if (f == created.end() || t == created.end()) {
      return absl::InternalError(absl::StrCat(context, ": an edge names a node not in the graph"));
    }
    edges.emplace_back(f->second, t->second);
    programmatic.push_back(edge_data[e].type == cudaGraphDependencyTypeProgrammatic);
  }
  const std::vector<int> position = CaptureOrder(n, edges);
  // Exact owners from the capture's record of where each launch ended (index in creation order).
  std::vector<int> owner(n, -1);
  if (launch_last_nodes.size() == launches.size()) {
    std::vector<std::vector<int>> predecessors(n);
    for (const auto& [f, t] : edges) predecessors[t].push_back(f);
    std::vector<bool> last(n, false);
    for (const auto& ends : launch_last_nodes) {
      for (cudaGraphNode_t h : ends) {
        if (auto it = created.find(h); it != created.end()) last[it->second] = true;
      }
    }
    for (size_t l = 0; l < launch_last_nodes.size(); ++l) {
      std::vector<int> todo;
      for (cudaGraphNode_t h : launch_last_nodes[l]) {
        auto it = created.find(h);
        if (it != created.end() && owner[it->second] < 0) {
          owner[it->second] = static_cast<int>(l);
          todo.push_back(it->second);
        }
      }
      while (!todo.empty()) {
        const int node = todo.back();
        todo.pop_back();
        for (int p : predecessors[node]) {
          if (last[p] || owner[p] >= 0) continue;
          owner[p] = static_cast<int>(l);
          todo.push_back(p);
        }
      }
    }
  }

  CudaGraphDump dump;
  for (const LoweredLaunch& launch : launches) dump.launches.push_back(SignatureOf(launch));
  std::vector<CapturedNode> nodes(n);
  for (int i = 0; i < n; ++i) {
    cudaGraphNodeType type;
    CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(handles[i], &type), context);
    CapturedNode& node = nodes[position[i]];
    node.type = std::string(CudaGraphNodeTypeName(type));
    node.handle = reinterpret_cast<uintptr_t>(handles[i]);
    if (type == cudaGraphNodeTypeKernel) node.kernel_name = KernelName(handles[i]);
  }
  for (size_t e = 0; e < edges.size(); ++e) {
    auto& [f, t] = edges[e];
    f = position[f];
    t = position[t];
    if (programmatic[e]) dump.programmatic.push_back(edges[e]);
  }
  std::sort(dump.programmatic.begin(), dump.programmatic.end());
  std::sort(edges.begin(), edges.end());
  std::vector<NodeOrigin> origins = AttributeNodes(nodes, dump.launches);
  for (int i = 0; i < n; ++i) {
    if (owner[i] >= 0) origins[position[i]] = {owner[i], Attribution::kExact, {}};
  }
  for (int i = 0; i < n; ++i) dump.nodes.push_back({std::move(nodes[i]), origins[i]});
  dump.edges = std::move(edges);
  dump.programmatic_edges = static_cast<int64_t>(dump.programmatic.size());
  return dump;
}

absl::StatusOr<std::string> CudaGraphDebugDot(cudaGraph_t graph, const CudaGraphDump& dump) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path =
      absl::StrCat(tmpdir != nullptr && *tmpdir ? tmpdir : "/tmp", "/reprise-cuda-graph-XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create a temporary file like '", path, "'"));
  }
  close(fd);
  const cudaError_t printed =
      cudaGraphDebugDotPrint(graph, path.c_str(), cudaGraphDebugDotFlagsVerbose);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  in.close();
  std::remove(path.c_str());
  RETURN_IF_ERROR(runtime::CudaStatus(printed, "cudaGraphDebugDotPrint", "the captured step"));

  std::string out =
      "// CUDA's own DOT of the captured training step (cudaGraphDebugDotPrint, verbose).\n"
      "// reprise annotation, by node handle: capture index, type, kernel -> reprise node.\n";
  for (size_t i = 0; i < dump.nodes.size(); ++i) {
    const CudaGraphNode& n = dump.nodes[i];
    absl::StrAppendFormat(
        &out, "//   %p  #%d %s %s -> %s [%s]\n", reinterpret_cast<const void*>(n.node.handle), i,
        n.node.type, n.node.kernel_name, dump.RepriseNodeName(n), AttributionName(n.origin.how));
  }
  absl::StrAppend(&out, text.str());
  return out;
}

}  // namespace reprise::capture
