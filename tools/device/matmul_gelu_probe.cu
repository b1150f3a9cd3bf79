// Whether cuDNN's graph API runs GPT-2's two GELU products faster than cuBLASLt's GELU epilogues.
// cuBLASLt's GELU_AUX_BIAS (c_fc's forward: h = x·W + b kept, g = gelu(h)) and DGELU (c_proj's data
// gradient times gelu'(h)) run at 500-540 TFLOP/s in every configuration it offers, where the plain
// product of the same shape runs at 735-770 (docs/benchmarks_gpt2.md). This times, at one shape
// (default GPT-2 124M at B=16, T=1024: M = 16384 rows, K = 768, N = 3072; bfloat16 in and out,
// float32 accumulation), with CUDA events, the median of 7 batches of 20 runs after 3 untimed
// (graph_timing.cuh's MedianMsPerRun):
//   cuBLASLt: the plain product, + bias, + bias + GELU (no aux), + bias + GELU_AUX, DGELU; each
//   with
//     the weight read as [K, N] rows and as [N, K] rows (transposed), the heuristic's first choice;
//   cuDNN: the same forms as graphs (matmul, then pointwise add, GELU_APPROX_TANH_FWD, or
//     GELU_APPROX_TANH_BWD against h), the first 12 execution plans that heuristics A and the
//     fallback list offer, each that builds timed; GPT-2's two layouts first.
// and checks each cuDNN form's outputs against cuBLASLt's (max |difference| over max |value|).
// Not part of the build:
//   nvcc -O2 -std=c++20 -arch=sm_90 -DCUDNN_FRONTEND_SKIP_JSON_LIB -I"$(python3 -c 'import site;
//   print(site.getsitepackages()[0])')/include" -o matmul_gelu_probe
//   tools/device/matmul_gelu_probe.cu -lcudnn -lcublasLt -lnvrtc -lcuda
// then `./matmul_gelu_probe [M K N]`.
// clang-format off
#include <cstring>  // Before cudnn-frontend, whose shim uses std::strlen without it.
// clang-format on
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_check.cuh"
#include "graph_timing.cuh"
#include "lt_probe_util.cuh"

namespace fe = cudnn_frontend;

namespace {

int64_t M = 16384, K = 768, N = 3072;
constexpr size_t kWorkspace = 64u << 20;
constexpr int64_t kMaxPlans = 12;  // Timed per graph, in the list's order.

double Tflops(double ms) { return 2.0 * M * N * K / (ms * 1e-3) / 1e12; }

__nv_bfloat16* Alloc(size_t n, uint32_t seed, float scale) {
  __nv_bfloat16* p = nullptr;
  CK(cudaMalloc(&p, n * sizeof(__nv_bfloat16)));
  FillBf16<<<1024, 256>>>(p, n, seed, scale);
  CK(cudaGetLastError());
  return p;
}

// max |a - b| / max |b| over n bfloat16 values.
double RelDiff(const __nv_bfloat16* a, const __nv_bfloat16* b, size_t n) {
  std::vector<__nv_bfloat16> ha(n), hb(n);
  CK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
    diff = std::max(diff, std::fabs(x - y));
    ref = std::max(ref, std::fabs(y));
  }
  return ref > 0 ? diff / ref : diff;
}

// The buffers every form reads or writes; the weight is [K, N] rows (or [N, K] when transposed).
struct Buffers {
  __nv_bfloat16 *x, *w, *bias, *h, *g, *h_ref, *g_ref, *dg, *dh, *dh_ref;
  void* workspace;
};

// ---- cuBLASLt, column-major: D^T[N, M] = W^T[N, K] · X^T[K, M] ----
struct LtForm {
  const char* name;
  cublasLtEpilogue_t epilogue;
};

double RunLt(cublasLtHandle_t lt, cudaStream_t s, const Buffers& b, const LtForm& form,
             bool weight_transposed, __nv_bfloat16* d, __nv_bfloat16* aux, const __nv_bfloat16* a) {
  cublasLtMatmulDesc_t desc;
  LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = weight_transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &form.epilogue,
                                    sizeof(form.epilogue)));
  const bool has_bias = form.epilogue == CUBLASLT_EPILOGUE_BIAS ||
                        form.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                        form.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  if (has_bias) {
    const void* bias = b.bias;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                      sizeof(bias)));
    const cudaDataType_t bias_type = CUDA_R_16BF;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                      sizeof(bias_type)));
  }
  if (aux != nullptr) {
    const void* aux_ptr = aux;
    const int64_t ld = N;
    const cudaDataType_t aux_type = CUDA_R_16BF;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr,
                                      sizeof(aux_ptr)));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type,
                                      sizeof(aux_type)));
  }
  cublasLtMatrixLayout_t la, lb, ld;
  if (weight_transposed) {
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));
  } else {
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, N, K, N));
  }
  LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));
  LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, N, M, N));
  cublasLtMatmulPreference_t pref;
  LT(cublasLtMatmulPreferenceCreate(&pref));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &kWorkspace, sizeof(kWorkspace)));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &result, &found));
  double ms = -1;
  if (found > 0) {
    const float one = 1, zero = 0;
    ms = MedianMsPerRun(s, [&] {
      return cublasLtMatmul(lt, desc, &one, b.w, la, a, lb, &zero, d, ld, d, ld, &result.algo,
                            b.workspace, kWorkspace, s) == CUBLAS_STATUS_SUCCESS;
    });
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  return ms;
}

// ---- cuDNN graphs, row-major: out[M, N] = x[M, K] · w[K, N] ----
enum Uid : int64_t { kX = 1, kW, kBias, kH, kG, kDG, kDH };
enum class CudnnForm { kPlain, kBias, kBiasGeluKeepH, kBiasGeluOnly, kDgelu };

const char* Name(CudnnForm f) {
  switch (f) {
    case CudnnForm::kPlain:
      return "matmul";
    case CudnnForm::kBias:
      return "matmul+bias";
    case CudnnForm::kBiasGeluKeepH:
      return "matmul+bias -> h, gelu(h) -> g";
    case CudnnForm::kBiasGeluOnly:
      return "matmul+bias+gelu -> g";
    case CudnnForm::kDgelu:
      return "matmul -> dgelu(., h) -> dh";
  }
  return "?";
}

std::shared_ptr<fe::graph::Graph> Describe(CudnnForm form, bool weight_transposed) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto x = g->tensor(
      fe::graph::Tensor_attributes().set_name("x").set_uid(kX).set_dim({1, M, K}).set_stride(
          {M * K, K, 1}));
  const std::vector<int64_t> w_stride =
      weight_transposed ? std::vector<int64_t>{K * N, 1, K} : std::vector<int64_t>{K * N, N, 1};
  auto w = g->tensor(
      fe::graph::Tensor_attributes().set_name("w").set_uid(kW).set_dim({1, K, N}).set_stride(
          w_stride));
  auto product = g->matmul(x, w,
                           fe::graph::Matmul_attributes().set_name("product").set_compute_data_type(
                               fe::DataType_t::FLOAT));
  product->set_data_type(fe::DataType_t::FLOAT);
  const std::vector<int64_t> out_dim{1, M, N}, out_stride{M * N, N, 1};
  auto as_output = [&](std::shared_ptr<fe::graph::Tensor_attributes> t, Uid uid) {
    t->set_output(true)
        .set_uid(uid)
        .set_dim(out_dim)
        .set_stride(out_stride)
        .set_data_type(fe::DataType_t::BFLOAT16);
  };
  if (form == CudnnForm::kPlain) {
    as_output(product, kH);
    return g;
  }
  if (form == CudnnForm::kDgelu) {
    auto h = g->tensor(
        fe::graph::Tensor_attributes().set_name("h").set_uid(kH).set_dim(out_dim).set_stride(
            out_stride));
    auto dh = g->pointwise(product, h,
                           fe::graph::Pointwise_attributes()
                               .set_name("dgelu")
                               .set_mode(fe::PointwiseMode_t::GELU_APPROX_TANH_BWD)
                               .set_compute_data_type(fe::DataType_t::FLOAT));
    as_output(dh, kDH);
    return g;
  }
  auto bias = g->tensor(
      fe::graph::Tensor_attributes().set_name("bias").set_uid(kBias).set_dim({1, 1, N}).set_stride(
          {N, N, 1}));
  auto h = g->pointwise(product, bias,
                        fe::graph::Pointwise_attributes()
                            .set_name("bias")
                            .set_mode(fe::PointwiseMode_t::ADD)
                            .set_compute_data_type(fe::DataType_t::FLOAT));
  if (form == CudnnForm::kBias) {
    as_output(h, kH);
    return g;
  }
  if (form == CudnnForm::kBiasGeluKeepH) as_output(h, kH);
  auto gelu = g->pointwise(h, fe::graph::Pointwise_attributes()
                                  .set_name("gelu")
                                  .set_mode(fe::PointwiseMode_t::GELU_APPROX_TANH_FWD)
                                  .set_compute_data_type(fe::DataType_t::FLOAT));
  as_output(gelu, kG);
  return g;
}

void ProbeCudnn(cudnnHandle_t handle, cudaStream_t s, const Buffers& b, CudnnForm form,
                bool weight_transposed) {
  printf("cuDNN %s, weight %s\n", Name(form), weight_transposed ? "[N,K]" : "[K,N]");
  auto g = Describe(form, weight_transposed);
  auto check = [&](fe::error_t e, const char* what) {
    if (!e.is_good()) printf("  %s: %s\n", what, e.get_message().c_str());
    return e.is_good();
  };
  if (!check(g->validate(), "validate") ||
      !check(g->build_operation_graph(handle), "build_operation_graph") ||
      !check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
             "create_execution_plans")) {
    return;
  }
  (void)g->check_support();
  std::unordered_map<int64_t, void*> pack{{kX, b.x}, {kW, b.w}};
  switch (form) {
    case CudnnForm::kPlain:
    case CudnnForm::kBias:
      pack[kH] = b.h;
      break;
    case CudnnForm::kBiasGeluKeepH:
      pack[kH] = b.h;
      pack[kG] = b.g;
      break;
    case CudnnForm::kBiasGeluOnly:
      pack[kG] = b.g;
      break;
    case CudnnForm::kDgelu:
      pack[kH] = b.h_ref;
      pack[kDH] = b.dh;
      pack[kX] = b.dg;
      break;
  }
  if (form != CudnnForm::kPlain && form != CudnnForm::kDgelu) pack[kBias] = b.bias;
  const int64_t plans = g->get_execution_plan_count();
  printf("  %lld plans\n", static_cast<long long>(plans));
  double best = -1;
  for (int64_t i = 0; i < std::min<int64_t>(plans, kMaxPlans); ++i) {
    std::string name;
    (void)g->get_plan_name_at_index(i, name);
    int64_t ws = 0;
    if (!g->build_plan_at_index(i).is_good() ||
        !g->get_workspace_size_plan_at_index(i, ws).is_good()) {
      printf("  plan %lld %s: does not build\n", static_cast<long long>(i), name.c_str());
      continue;
    }
    if (ws > static_cast<int64_t>(kWorkspace)) {
      printf("  plan %lld %s: workspace %lld too large\n", static_cast<long long>(i), name.c_str(),
             static_cast<long long>(ws));
      continue;
    }
    const double ms = MedianMsPerRun(
        s, [&] { return g->execute_plan_at_index(handle, pack, b.workspace, i).is_good(); });
    if (ms < 0) {
      printf("  plan %lld %s: execute failed\n", static_cast<long long>(i), name.c_str());
      continue;
    }
    CK(cudaStreamSynchronize(s));
    std::string agree;  // Against cuBLASLt's references, which read the weight as [K, N] rows.
    const size_t n = static_cast<size_t>(M) * N;
    if (weight_transposed) {
    } else if (form == CudnnForm::kBiasGeluKeepH || form == CudnnForm::kBiasGeluOnly) {
      agree = "g vs cuBLASLt " + std::to_string(RelDiff(b.g, b.g_ref, n));
      if (form == CudnnForm::kBiasGeluKeepH)
        agree += ", h " + std::to_string(RelDiff(b.h, b.h_ref, n));
    } else if (form == CudnnForm::kDgelu) {
      agree = "dh vs cuBLASLt " + std::to_string(RelDiff(b.dh, b.dh_ref, n));
    } else if (form == CudnnForm::kBias) {
      agree = "h vs cuBLASLt " + std::to_string(RelDiff(b.h, b.h_ref, n));
    }
    printf("  plan %lld %s ws %lld: %.4f ms, %.0f TFLOP/s  %s\n", static_cast<long long>(i),
           name.c_str(), static_cast<long long>(ws), ms, Tflops(ms), agree.c_str());
    if (best < 0 || ms < best) best = ms;
  }
  if (best > 0) printf("  best %.4f ms, %.0f TFLOP/s\n", best, Tflops(best));
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // Line by line: a run stopped by a timeout keeps its lines.
  if (argc == 4) {
    M = atoll(argv[1]);
    K = atoll(argv[2]);
    N = atoll(argv[3]);
  }
  printf("M %lld K %lld N %lld, cuDNN %zu, cuBLASLt %zu\n", static_cast<long long>(M),
         static_cast<long long>(K), static_cast<long long>(N), cudnnGetVersion(),
         cublasLtGetVersion());
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  Buffers b{};
  b.x = Alloc(M * K, 1, 1.0f);
  b.w = Alloc(K * N, 2, 0.05f);
  b.bias = Alloc(N, 3, 0.5f);
  b.dg = Alloc(M * K, 4, 1.0f);  // The data gradient's input: dY, [M, K] like x.
  for (__nv_bfloat16** p : {&b.h, &b.g, &b.h_ref, &b.g_ref, &b.dh, &b.dh_ref}) {
    CK(cudaMalloc(p, static_cast<size_t>(M) * N * 2));
  }
  CK(cudaMalloc(&b.workspace, kWorkspace));
  CK(cudaDeviceSynchronize());

  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  const LtForm forms[] = {{"plain", CUBLASLT_EPILOGUE_DEFAULT},
                          {"bias", CUBLASLT_EPILOGUE_BIAS},
                          {"bias+gelu (no aux)", CUBLASLT_EPILOGUE_GELU_BIAS},
                          {"bias+gelu_aux", CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
                          {"dgelu", CUBLASLT_EPILOGUE_DGELU}};
  for (bool transposed : {false, true}) {
    for (const LtForm& form : forms) {
      __nv_bfloat16* d = b.h_ref;
      __nv_bfloat16* aux = nullptr;
      const __nv_bfloat16* a = b.x;
      if (form.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        d = b.g_ref;
        aux = b.h_ref;
      } else if (form.epilogue == CUBLASLT_EPILOGUE_DGELU) {
        d = b.dh_ref;
        aux = b.h_ref;
        a = b.dg;
      } else if (form.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) {
        d = b.g;
      }
      const double ms = RunLt(lt, s, b, form, transposed, d, aux, a);
      printf("cuBLASLt %-20s weight %s: %.4f ms, %.0f TFLOP/s\n", form.name,
             transposed ? "[N,K]" : "[K,N]", ms, ms > 0 ? Tflops(ms) : 0.0);
    }
  }
  // The references the cuDNN forms are checked against: the weight as [K, N] rows, h_ref and g_ref
  // from GELU_AUX_BIAS, dh_ref from DGELU against that h.
  RunLt(lt, s, b, forms[3], false, b.g_ref, b.h_ref, b.x);
  RunLt(lt, s, b, forms[4], false, b.dh_ref, b.h_ref, b.dg);
  CK(cudaDeviceSynchronize());

  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    printf("cudnnCreate failed\n");
    return 1;
  }
  cudnnSetStream(handle, s);
  // GPT-2's layouts first (c_fc's weight is [N, K], c_proj's data gradient reads its weight as
  // [K, N]), then the rest.
  ProbeCudnn(handle, s, b, CudnnForm::kBiasGeluKeepH, true);
  ProbeCudnn(handle, s, b, CudnnForm::kDgelu, false);
  ProbeCudnn(handle, s, b, CudnnForm::kPlain, true);
  ProbeCudnn(handle, s, b, CudnnForm::kBiasGeluKeepH, false);
  ProbeCudnn(handle, s, b, CudnnForm::kBiasGeluOnly, true);
  ProbeCudnn(handle, s, b, CudnnForm::kBias, true);
  ProbeCudnn(handle, s, b, CudnnForm::kDgelu, true);
  ProbeCudnn(handle, s, b, CudnnForm::kPlain, false);
  printf("done\n");
  return 0;
}
