"""Tiny random models of the architectures the OCR families run on, for real vLLM (CPU).

Each is a folder vLLM serves with ``--load-format dummy`` (random weights from the config,
nothing from a hub): ``config.json`` (two layers a side, head size 32: vLLM's CPU attention
needs at least that), a byte-level BPE tokenizer with the architecture's special tokens, the
architecture's own image processor (tiny pixel budget: a page becomes a few image tokens) and
a chat template in the checkpoint's shape. What runs is vLLM's real model class, processor and
chat-template handling for the architecture, which is what the family tier proves the
recipes' requests against (``tests/vllm_real/test_vllm_families.py``).

| architecture | families served on it |
| --- | --- |
| Qwen2.5-VL | olmOCR-2, Nanonets-OCR2, Qwen2.5-VL |
| Qwen3-VL | Chandra, Qwen3-VL |

The Idefics3 model of the older tests is :mod:`tests.vllm_real.tiny_vlm`.

Run as ``python -m tests.vllm_real.tiny_models DIR [ARCH ...]`` to build them by hand.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

HIDDEN = 64
HEADS = 2
HEAD_DIM = HIDDEN // HEADS
LAYERS = 2
MAX_POSITIONS = 32768

CORPUS = [
    "Convert this page to markdown. Output only the markdown.",
    "Extract the text from the above document as if you were reading it naturally.",
    "<html><body><h1 data-bbox=\"1 2 3 4\">Title</h1><p>Text</p></body></html>",
    "The quick brown fox jumps over the lazy dog. 0123456789 ,.;:!? ()[]{} <> $ \\ | # *",
]

#: Qwen2-VL's chat template, as in the ``chat_template.json`` of Qwen/Qwen2-VL-7B-Instruct and
#: Qwen/Qwen2.5-VL-7B-Instruct (and so of olmOCR-2 and Nanonets-OCR2, fine-tunes of the latter):
#: a default system message, image placeholders where the image parts are.
QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Qwen3-VL's shape (Qwen/Qwen3-VL-*-Instruct ``chat_template.json``, tools and thinking left
#: out): no default system message; a system message's content may be a string or parts.
QWEN3_VL_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}<|im_start|>system\n{%- if messages[0].content is string %}"
    "{{- messages[0].content }}{%- else %}{%- for content in messages[0].content %}{%- if 'text' in content %}"
    "{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' %}<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for content in message.content %}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>{%- elif 'text' in content %}{{- content.text }}{%- endif %}"
    "{%- endfor %}{%- endif %}<|im_end|>\n{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

QWEN_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|image_pad|>", "<|video_pad|>",
]  # fmt: skip


def build_tokenizer(specials: list[str], *, eos: str, pad: str, extra: dict[str, str] | None = None):
    """A byte-level BPE tokenizer trained on :data:`CORPUS` with ``specials`` as special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    kwargs = {"extra_special_tokens": extra} if extra else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, pad_token=pad, additional_special_tokens=specials,
        model_max_length=MAX_POSITIONS, **kwargs,
    )  # fmt: skip


def _qwen_text(tokenizer, ids: dict[str, int], **more) -> dict:
    return {
        "vocab_size": len(tokenizer), "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
        "max_position_embeddings": MAX_POSITIONS, "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
        # mrope sections split the rotary half-dimension (16) into time, height and width.
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 10000.0},
        **more,
    }  # fmt: skip


def _qwen_tokens(ids: dict[str, int]) -> dict[str, int]:
    return {
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
    }  # fmt: skip


def _save(folder: Path, config, processor, note: dict) -> None:
    config.save_pretrained(folder)
    processor.save_pretrained(folder)
    (folder / "tiny_model.json").write_text(json.dumps(note))


def build_qwen2_5_vl(folder: Path) -> None:
    """Qwen2.5-VL (``Qwen2_5_VLForConditionalGeneration``): 14-px patches merged 2 x 2."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLProcessor, Qwen2VLVideoProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = build_tokenizer(QWEN_SPECIALS, eos="<|im_end|>", pad="<|endoftext|>")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    # 112 x 112 pixels at most: 64 patches of 14, merged to 16 image tokens.
    images = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112, patch_size=14, merge_size=2)
    processor = Qwen2_5_VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(), chat_template=QWEN2_VL_TEMPLATE
    )
    vision = {
        "depth": LAYERS, "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_heads": HEADS,
        "out_hidden_size": HIDDEN, "fullatt_block_indexes": [LAYERS - 1], "window_size": 112,
        "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
    }  # fmt: skip
    config = Qwen2_5_VLConfig(
        text_config=_qwen_text(tokenizer, ids), vision_config=vision, architectures=["Qwen2_5_VLForConditionalGeneration"],
        **_qwen_tokens(ids),
    )  # fmt: skip
    _save(folder, config, processor, {"architecture": "qwen2_5_vl", "vocab_size": len(tokenizer)})


def build_qwen3_vl(folder: Path) -> None:
    """Qwen3-VL (``Qwen3VLForConditionalGeneration``): 16-px patches merged 2 x 2, deepstack."""
    from transformers import Qwen3VLConfig, Qwen3VLProcessor, Qwen3VLVideoProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = build_tokenizer(QWEN_SPECIALS, eos="<|im_end|>", pad="<|endoftext|>")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIALS}
    images = Qwen2VLImageProcessorPil(min_pixels=64 * 64, max_pixels=128 * 128, patch_size=16, merge_size=2)
    processor = Qwen3VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(), chat_template=QWEN3_VL_TEMPLATE
    )
    text = _qwen_text(tokenizer, ids, head_dim=HEAD_DIM)
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_interleaved": True}
    vision = {
        "depth": LAYERS, "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_heads": HEADS,
        "out_hidden_size": HIDDEN, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
        "num_position_embeddings": 64, "deepstack_visual_indexes": [LAYERS - 1],
    }  # fmt: skip
    config = Qwen3VLConfig(
        text_config=text, vision_config=vision, architectures=["Qwen3VLForConditionalGeneration"], **_qwen_tokens(ids)
    )
    _save(folder, config, processor, {"architecture": "qwen3_vl", "vocab_size": len(tokenizer)})


#: Every architecture this module builds, by name.
BUILDERS: dict[str, Callable[[Path], None]] = {
    "qwen2_5_vl": build_qwen2_5_vl,
    "qwen3_vl": build_qwen3_vl,
}


def build(root: str | Path, architectures: list[str] | None = None) -> dict[str, Path]:
    """Build each architecture (all by default) into ``root/ARCH`` unless already there."""
    root = Path(root)
    built = {}
    for name in architectures or list(BUILDERS):
        folder = root / name
        if not (folder / "tiny_model.json").exists():
            folder.mkdir(parents=True, exist_ok=True)
            BUILDERS[name](folder)
        built[name] = folder
    return built


if __name__ == "__main__":
    for name, path in build(sys.argv[1] if len(sys.argv) > 1 else "tiny-models", sys.argv[2:] or None).items():
        print(name, path)
