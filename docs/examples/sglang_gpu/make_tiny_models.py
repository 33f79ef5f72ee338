"""A tiny Llama target model and a matching EAGLE-3 draft model, random weights, written locally
(nothing downloaded): config.json + model.safetensors + a byte-level tokenizer.

    python make_tiny_models.py OUT_DIR [--layers 8 --hidden 1024]

Random weights would make the draft almost never right (accept length ~1). To exercise the
verify path with accepted drafts too, one residual dimension D carries a constant: the
embeddings set it to 1, no layer writes to it (its rows in o_proj/down_proj are zero), the final
norms read only D, and lm_head row 0 reads D. Both models then predict token 0 at every
position, greedy verification accepts every draft token, and the accept length is
speculative_num_draft_tokens. The compute per verify (every matrix product) is unchanged.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

D = 0  # the constant residual dimension


def tokenizer_files(out: Path) -> int:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<s>", "</s>"])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_max_length": 4096,
            }
        )
    )
    return tok.get_vocab_size()


def rand(*shape: int) -> torch.Tensor:
    return (torch.randn(*shape) * 0.02).to(torch.bfloat16)


def layer(prefix: str, hidden: int, inter: int, heads: int, kv: int, qkv_in: int) -> dict:
    hd = hidden // heads
    w = {
        f"{prefix}.self_attn.q_proj.weight": rand(heads * hd, qkv_in),
        f"{prefix}.self_attn.k_proj.weight": rand(kv * hd, qkv_in),
        f"{prefix}.self_attn.v_proj.weight": rand(kv * hd, qkv_in),
        f"{prefix}.self_attn.o_proj.weight": rand(hidden, heads * hd),
        f"{prefix}.mlp.gate_proj.weight": rand(inter, hidden),
        f"{prefix}.mlp.up_proj.weight": rand(inter, hidden),
        f"{prefix}.mlp.down_proj.weight": rand(hidden, inter),
        f"{prefix}.input_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
        f"{prefix}.post_attention_layernorm.weight": torch.ones(hidden, dtype=torch.bfloat16),
    }
    w[f"{prefix}.self_attn.o_proj.weight"][D] = 0  # nothing writes to dimension D
    w[f"{prefix}.mlp.down_proj.weight"][D] = 0
    return w


def head_reading_d(vocab: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    norm = torch.zeros(hidden, dtype=torch.bfloat16)
    norm[D] = 1
    lm = torch.zeros(vocab, hidden, dtype=torch.bfloat16)
    lm[0, D] = 1
    return norm, lm


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=2816)
    args = p.parse_args()
    torch.manual_seed(0)
    target, draft = args.out / "tiny-llama", args.out / "tiny-llama-eagle3"
    for d in (target, draft):
        d.mkdir(parents=True, exist_ok=True)
    vocab = tokenizer_files(target)
    h, i, nh, kv = args.hidden, args.intermediate, args.heads, args.kv_heads
    common = {
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": i,
        "num_attention_heads": nh,
        "num_key_value_heads": kv,
        "head_dim": h // nh,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": vocab - 2,
        "eos_token_id": vocab - 1,
    }
    (target / "config.json").write_text(
        json.dumps(
            {**common, "architectures": ["LlamaForCausalLM"], "num_hidden_layers": args.layers}
        )
    )
    embed = rand(vocab, h)
    embed[:, D] = 1
    weights = {"model.embed_tokens.weight": embed}
    for n in range(args.layers):
        weights.update(layer(f"model.layers.{n}", h, i, nh, kv, h))
    weights["model.norm.weight"], weights["lm_head.weight"] = head_reading_d(vocab, h)
    save_file(weights, str(target / "model.safetensors"))

    (draft / "config.json").write_text(
        json.dumps(
            {
                **common,
                "architectures": ["LlamaForCausalLMEagle3"],
                "num_hidden_layers": 1,
                "draft_vocab_size": vocab,
            }
        )
    )
    dw = layer("midlayer", h, i, nh, kv, 2 * h)  # EAGLE-3: attention over [embeds, hidden]
    dw["midlayer.hidden_norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    fc = rand(h, 3 * h)
    fc[D] = 0
    fc[D, [D, h + D, 2 * h + D]] = 1  # the three captured target layers' D, summed: 3
    dw["fc.weight"] = fc
    dw["norm.weight"], dw["lm_head.weight"] = head_reading_d(vocab, h)
    dw["d2t"] = torch.zeros(vocab, dtype=torch.int64)  # draft id == target id
    dw["t2d"] = torch.ones(vocab, dtype=torch.bool)
    save_file(dw, str(draft / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (draft / name).write_bytes((target / name).read_bytes())
    size = sum(f.stat().st_size for d in (target, draft) for f in d.iterdir())
    print(f"tiny models: {target} and {draft}, vocab {vocab}, {size / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
