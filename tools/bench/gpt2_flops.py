"""GPT-2's parameter count, training FLOPs per token and MFU: one formula for every framework.

The GPT-2 peers (torch_gpt2.py, llmc_gpt2.sh) and report.py use these functions, so that reprise,
PyTorch and llm.c are scored by the same arithmetic from their measured step times.

Parameters (GPT-2 with tied token embedding and output projection, biases, LayerNorms):
    N = V·C + P·C + L·(12·C² + 13·C) + 2·C
V vocabulary, P positions (the model's context), L layers, C width. GPT-2 124M (V=50257,
P=1024, L=12, C=768): N = 124,439,808.

Training FLOPs per token, as llm.c's gpt2_estimate_mfu computes them (train_gpt2.cu):
    F = 6·N + 6·L·C·T
6·N: every weight's multiply-add in forward (2) and backward (4); 6·L·C·T: the attention
matmuls (QKᵀ and AV over T keys), counted for the causal half. nanoGPT's estimate_mfu counts
12·L·C·T instead (the full square); we use llm.c's. N counts the real vocabulary (llm.c's own
print counts its padded 50,304 rows; its MFU here is recomputed with this N).

MFU = F · tokens per second / peak, the peak being the GPU's dense bf16 tensor-core rate
(H100 SXM and H200: 989.4 TFLOP/s, NVIDIA's datasheets; 1,979 is with 2:4 sparsity).
"""

# Dense bf16 tensor-core peak, TFLOP/s, by a substring of the device name (first match wins).
PEAK_BF16_TFLOPS = (("H200", 989.4), ("H100 PCIe", 756.5), ("H100", 989.4), ("A100", 312.0))

FORMULA = "6*N + 6*L*C*T FLOPs per token (llm.c's gpt2_estimate_mfu), N = all parameters"


def num_parameters(layers, width, vocab, positions):
    """Parameters of a GPT-2 with a tied output projection (each tensor counted once)."""
    c = width
    return vocab * c + positions * c + layers * (12 * c * c + 13 * c) + 2 * c


def flops_per_token(params, layers, width, seq):
    """Training FLOPs (forward + backward) per token: llm.c's 6·N + 6·L·C·T."""
    return 6 * params + 6 * layers * width * seq


def peak_tflops(gpu_name, override=None):
    """The dense bf16 peak for `gpu_name` in TFLOP/s, `override` if given, else None."""
    if override:
        return float(override)
    for key, tflops in PEAK_BF16_TFLOPS:
        if key in (gpu_name or ""):
            return tflops
    return None


def tokens_per_s(batch, seq, ms):
    return batch * seq / (ms / 1000.0)


def mfu(params, layers, width, seq, batch, ms, peak):
    """Model FLOPs utilisation of a step of `ms` milliseconds, or None without a peak."""
    if not peak or not ms:
        return None
    flops = flops_per_token(params, layers, width, seq) * tokens_per_s(batch, seq, ms)
    return flops / (peak * 1e12)


def from_config(config, ms, gpu_name, peak_override=None):
    """(tokens/s, MFU or None) of one step time for a result's config (report.py's view): keys
    batch, seq, layers, width, vocab, positions (or params); GPT-2 124M where absent."""
    layers = int(config.get("layers") or 12)
    width = int(config.get("width") or 768)
    seq = int(config.get("seq") or 1024)
    batch = int(config.get("batch") or 1)
    params = config.get("params") or num_parameters(
        layers, width, int(config.get("vocab") or 50257),
        int(config.get("positions") or config.get("max_positions") or 1024))
    peak = peak_tflops(gpu_name, peak_override)
    return tokens_per_s(batch, seq, ms), mfu(int(params), layers, width, seq, batch, ms, peak)
