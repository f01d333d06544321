"""Attention, recurrent, loss and signal ops (converters/ops/{attention,seqmix,rnn,loss,signal}.py)."""

_HALF = "fused SDPA keeps the softmax in float32; the reference rounds each step in half precision (1-ulp diffs)"
_BF16 = "fused SDPA accumulates the softmax in float32; the reference sums it in bfloat16 (1-ulp diffs)"
_EXPANDED = "Softmax computes in float32 and rounds once; the reference rounds each of its steps in half precision"
_DFT = "near-zero outputs checked at atol 1e-7 need float64 sums; a float32 DFT errs by 2e-7 (onnxruntime fails too)"

SKIPS: dict[str, dict[str, str]] = {
    "all": {
        "test_attention_3d_causal_bf16": _BF16,
        "test_attention_4d_attn_mask_causal_bf16": _BF16,
        "test_attention_4d_causal_bf16": _BF16,
        "test_attention_4d_causal_padded_kv_bf16": _BF16,
        "test_attention_4d_padded_kv_bf16": _BF16,
        "test_attention_4d_causal_fp16": _HALF,
        "test_attention_3d_causal_bf16_expanded": _EXPANDED,
        "test_attention_4d_attn_mask_causal_bf16_expanded": _EXPANDED,
        "test_attention_4d_causal_bf16_expanded": _EXPANDED,
        "test_attention_4d_causal_padded_kv_bf16_expanded": _EXPANDED,
        "test_attention_4d_padded_kv_bf16_expanded": _EXPANDED,
        "test_attention_4d_causal_fp16_expanded": _EXPANDED,
        "test_dft_inverse": _DFT,
        "test_dft_inverse_opset19": _DFT,
    },
    "torch": {
        "test_attention_4d_fp16": _HALF,
    },
}
