"""A DeepSeek-V3-architecture model folder for proxy launches: config.json and a tokenizer, no
weights (issue 17). The attention dimensions are Kimi-K2's published ones (MLA: q_lora_rank
1536, kv_lora_rank 512, qk_nope 128 + qk_rope 64, v_head_dim 128, 64 heads, hidden 7168);
the full depth (61 layers, 384 routed experts) is what the config says, the proxy serves
`layers` of it with `override` keys (fewer experts) and random weights. The EAGLE-3 draft is a
one-layer Llama head at the same hidden size, also config only (random weights at launch).

    python make_dsv3_proxy_model.py OUT_DIR   # OUT_DIR/dsv3, OUT_DIR/dsv3-eagle3; tokenizer
                                              # copied from OUT_DIR/tiny-llama (make_tiny_models.py)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

VOCAB = 163840  # Kimi-K2's; the byte-level tokenizer's 258 ids are all inside it
# What the target and its draft share.
COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "num_attention_heads": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 50000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 256,
    "eos_token_id": 257,
}
KIMI_K2 = {
    **COMMON,
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_key_value_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.827,
}
EAGLE3 = {
    **COMMON,
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "draft_vocab_size": VOCAB,
    "num_hidden_layers": 1,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


def main() -> None:
    out = Path(sys.argv[1])
    for name, config in (("dsv3", KIMI_K2), ("dsv3-eagle3", EAGLE3)):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        for tok in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(out / "tiny-llama" / tok, folder / tok)
        print(f"{folder}: config.json ({config['architectures'][0]}), tokenizer, no weights")


if __name__ == "__main__":
    main()
