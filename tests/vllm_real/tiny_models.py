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
| Qwen3-VL | Chandra, Qwen3-VL, FireRed-OCR |
| Qianfan-OCR (InternViT encoder, Qwen3 decoder; vLLM's own config class) | Qianfan-OCR, Qianfan-OCR Layout-as-Thought |
| HunYuanVL (Transformers backend) | built, not served: see docs/testing.md |
| LightOnOCR (Mistral3 config: Pixtral encoder, Qwen3 decoder) | LightOnOCR-2, LightOnOCR-2-bbox, LightOnOCR-3 1B |
| GLM-OCR (GLM-4.1V processor) | GLM-OCR |
| Qwen3.5 (Qwen3-VL processor, gated-delta-net and attention layers) | LightOnOCR-3 0.8B/4B, Surya OCR 2 |
| Qwen3.5 mixture of experts | Infinity-Parser2 |
| PaddleOCR-VL | built, not served: see ``test_vllm_families.py`` |

Chat templates: Qwen2-VL's is the checkpoints' own; the others follow their checkpoint's shape
(roles, where the image placeholder goes) without claiming to be byte-for-byte copies.

The Idefics3 that ``llm-ocr run``'s test launches vLLM on is :mod:`tests.vllm_real.tiny_vlm`'s
(``idefics3`` here: built in the same process as the others).

Run as ``python -m tests.vllm_real.tiny_models DIR [ARCH ...]`` to build them by hand.
"""

from __future__ import annotations

import json
import os
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


#: ChatML whose image parts are InternVL's ``<image>`` placeholder (vLLM's InternVL processor
#: expands it to ``<img>``, the tile tokens, ``</img>``): Qianfan-OCR's shape, thinking left out.
QIANFAN_TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n{%- if message['content'] is string %}"
    "{{ message['content'] }}{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}<image>\n"
    "{%- elif content['type'] == 'text' %}{{ content['text'] }}{%- endif %}{%- endfor %}{%- endif %}<|im_end|>\n"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking %}<think>\n{%- endif %}{%- endif %}"
)


def build_qianfan_ocr(folder: Path) -> None:
    """Qianfan-OCR (``QianfanOCRForConditionalGeneration``, vLLM's own config class): an InternViT
    encoder on 56 x 56 tiles (4 tokens a tile, at most 2 tiles and a thumbnail), a Qwen3 decoder.
    vLLM builds the InternVL processor itself from the config; the folder needs only the tokenizer
    and its chat template."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<think>",
                "</think>"]  # fmt: skip
    tokenizer = build_tokenizer(specials, eos="<|im_end|>", pad="<|endoftext|>")
    tokenizer.chat_template = QIANFAN_TEMPLATE
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    config = {
        "architectures": ["QianfanOCRForConditionalGeneration"], "model_type": "qianfan_ocr",
        "vision_config": {"hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_hidden_layers": LAYERS,
                          "num_attention_heads": HEADS, "image_size": 56, "patch_size": 14},
        "text_config": {
            "model_type": "qwen3", "vocab_size": len(tokenizer), "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
            "head_dim": HEAD_DIM, "max_position_embeddings": MAX_POSITIONS, "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
            "architectures": ["Qwen3ForCausalLM"],
        },
        "downsample_ratio": 0.5, "dynamic_image_size": True, "force_image_size": 56, "max_dynamic_patch": 2,
        "min_dynamic_patch": 1, "use_thumbnail": True, "ps_version": "v2", "select_layer": -1,
        "image_token_id": ids["<IMG_CONTEXT>"], "eos_token_id": ids["<|im_end|>"],
    }  # fmt: skip
    tokenizer.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "tiny_model.json").write_text(json.dumps({"architecture": "qianfan_ocr", "vocab_size": len(tokenizer)}))


#: HunyuanOCR's shape: the system message (HunyuanOCR's recipe sends an empty one), then the user's
#: image between its start and end tokens, then its text; a plain generation prompt.
HUNYUAN_TEMPLATE = (
    "<|hy_begin|>{%- for message in messages %}{%- if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|hy_image_start|><|hy_image|><|hy_image_end|>{%- elif content['type'] == 'text' %}{{ content['text'] }}"
    "{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'system' %}<|hy_sep|>{%- else %}<|hy_turn|>"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}<|hy_assistant|>{%- endif %}"
)


def build_hunyuan_vl(folder: Path) -> None:
    """HunyuanOCR (``HunYuanVLForConditionalGeneration``, served by vLLM's Transformers backend):
    16-px patches merged 2 x 2, a dense HunYuan decoder."""
    from transformers import HunYuanVLConfig, HunYuanVLProcessor
    from transformers.models.hunyuan_vl.image_processing_pil_hunyuan_vl import HunYuanVLImageProcessorPil

    specials = ["<|hy_pad|>", "<|hy_begin|>", "<|hy_end|>", "<|hy_eod|>", "<|hy_sep|>", "<|hy_turn|>",
                "<|hy_assistant|>", "<|hy_image_start|>", "<|hy_image_end|>", "<|hy_image|>", "<|hy_newline|>"]
    tokenizer = build_tokenizer(specials, eos="<|hy_end|>", pad="<|hy_pad|>", extra={
        "image_token": "<|hy_image|>", "image_start_token": "<|hy_image_start|>", "image_end_token": "<|hy_image_end|>"})
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    images = HunYuanVLImageProcessorPil(min_pixels=64 * 64, max_pixels=128 * 128)
    processor = HunYuanVLProcessor(image_processor=images, tokenizer=tokenizer, chat_template=HUNYUAN_TEMPLATE)
    text = {
        "vocab_size": len(tokenizer), "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS, "bos_token_id": ids["<|hy_begin|>"], "eos_token_id": ids["<|hy_end|>"],
        "pad_token_id": ids["<|hy_pad|>"], "eod_token_id": ids["<|hy_eod|>"], "sep_token_id": ids["<|hy_sep|>"],
    }  # fmt: skip
    vision = {"hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "out_hidden_size": HIDDEN, "text_hidden_size": HIDDEN, "patch_size": 16,
              "spatial_merge_size": 2, "max_image_size": 128, "min_image_size": 64, "img_max_token_num": 64}  # fmt: skip
    config = HunYuanVLConfig(
        text_config=text, vision_config=vision, architectures=["HunYuanVLForConditionalGeneration"],
        image_token_id=ids["<|hy_image|>"], im_start_id=ids["<|hy_image_start|>"], im_end_id=ids["<|hy_image_end|>"],
        im_newline_id=ids["<|hy_newline|>"],
    )  # fmt: skip
    _save(folder, config, processor, {"architecture": "hunyuan_vl", "vocab_size": len(tokenizer)})


#: PaddleOCR-VL's shape (the checkpoint's ``chat_template.jinja``): images first, then texts,
#: as ``User: ...\nAssistant: `` after a begin-of-sentence token.
PADDLEOCR_VL_TEMPLATE = (
    "<|begin_of_sentence|>{%- for message in messages -%}{%- if message['role'] == 'user' -%}User: "
    "{%- for content in message['content'] -%}{%- if content['type'] == 'image' -%}"
    "<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>{%- endif -%}{%- endfor -%}"
    "{%- for content in message['content'] -%}{%- if content['type'] == 'text' -%}{{ content['text'] }}{%- endif -%}"
    "{%- endfor -%}\n{%- elif message['role'] == 'assistant' -%}Assistant: {{ message['content'] }}</s>"
    "{%- elif message['role'] == 'system' -%}{{ message['content'] }}\n{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}Assistant: {%- endif -%}"
)


def build_paddleocr_vl(folder: Path) -> None:
    """PaddleOCR-VL (``PaddleOCRVLForConditionalGeneration``): SigLIP-style NaViT encoder, ERNIE decoder."""
    from transformers import PaddleOCRVLConfig, PaddleOCRVLProcessor
    from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import PaddleOCRVLImageProcessorPil

    specials = ["<unk>", "<|begin_of_sentence|>", "</s>", "<|end_of_sentence|>", "<|IMAGE_START|>",
                "<|IMAGE_PLACEHOLDER|>", "<|IMAGE_END|>", "<|video_pad|>"]  # fmt: skip
    tokenizer = build_tokenizer(specials, eos="</s>", pad="<unk>", extra={"image_token": "<|IMAGE_PLACEHOLDER|>"})
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    images = PaddleOCRVLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112)
    processor = PaddleOCRVLProcessor(image_processor=images, tokenizer=tokenizer, chat_template=PADDLEOCR_VL_TEMPLATE)
    text = {
        "vocab_size": len(tokenizer), "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS, "bos_token_id": ids["<|begin_of_sentence|>"],
        "eos_token_id": ids["</s>"], "pad_token_id": ids["<unk>"],
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 10000.0},
    }  # fmt: skip
    vision = {"hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "patch_size": 14, "image_size": 112, "spatial_merge_size": 2}  # fmt: skip
    config = PaddleOCRVLConfig(
        text_config=text, vision_config=vision, architectures=["PaddleOCRVLForConditionalGeneration"],
        image_token_id=ids["<|IMAGE_PLACEHOLDER|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|IMAGE_START|>"], vision_end_token_id=ids["<|IMAGE_END|>"],
    )  # fmt: skip
    _save(folder, config, processor, {"architecture": "paddleocr_vl", "vocab_size": len(tokenizer)})


#: ChatML without a default system message, image parts as the image token (LightOnOCR-2's shape).
LIGHTON_TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n{%- if message['content'] is string %}"
    "{{ message['content'] }}{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}<|image_pad|>"
    "{%- elif content['type'] == 'text' %}{{ content['text'] }}{%- endif %}{%- endfor %}{%- endif %}<|im_end|>\n"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def build_lightonocr(folder: Path) -> None:
    """LightOnOCR (``LightOnOCRForConditionalGeneration`` on a Mistral3 config): Pixtral encoder,
    Qwen3 decoder, vLLM's Pixtral processor."""
    from transformers import Mistral3Config, PixtralImageProcessor, PixtralProcessor

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|vision_pad|>", "<|vision_end|>"]
    tokenizer = build_tokenizer(specials, eos="<|im_end|>", pad="<|endoftext|>")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    images = PixtralImageProcessor(size={"longest_edge": 112}, patch_size=14)
    processor = PixtralProcessor(
        image_processor=images, tokenizer=tokenizer, patch_size=14, spatial_merge_size=2, chat_template=LIGHTON_TEMPLATE,
        image_token="<|image_pad|>", image_break_token="<|vision_pad|>", image_end_token="<|vision_end|>",
    )  # fmt: skip
    text = {
        "model_type": "qwen3", "vocab_size": len(tokenizer), "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS, "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"], "tie_word_embeddings": True,
    }  # fmt: skip
    vision = {"model_type": "pixtral", "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "head_dim": HEAD_DIM, "image_size": 112, "patch_size": 14}  # fmt: skip
    config = Mistral3Config(
        text_config=text, vision_config=vision, architectures=["LightOnOCRForConditionalGeneration"],
        image_token_index=ids["<|image_pad|>"], spatial_merge_size=2, multimodal_projector_bias=False,
        projector_hidden_act="gelu", vision_feature_layer=-1,
    )  # fmt: skip
    _save(folder, config, processor, {"architecture": "lightonocr", "vocab_size": len(tokenizer)})


#: GLM-4.1V's shape (GLM-OCR's ``chat_template.jinja``): ``[gMASK]<sop>``, role tokens, the
#: image between begin/end-of-image tokens.
GLM_TEMPLATE = (
    "[gMASK]<sop>{%- for message in messages %}<|{{ message['role'] }}|>\n{%- if message['content'] is string %}"
    "{{ message['content'] }}{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|begin_of_image|><|image|><|end_of_image|>{%- elif content['type'] == 'text' %}{{ content['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}<|assistant|>\n{%- endif %}"
)


def build_glm_ocr(folder: Path) -> None:
    """GLM-OCR (``GlmOcrForConditionalGeneration``): CogViT encoder, GLM decoder, GLM-4.1V processor."""
    from transformers import Glm4vProcessor, Glm4vVideoProcessor, GlmOcrConfig
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    specials = ["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|begin_of_image|>",
                "<|end_of_image|>", "<|image|>", "<|begin_of_video|>", "<|end_of_video|>", "<|video|>"]  # fmt: skip
    tokenizer = build_tokenizer(specials, eos="<|user|>", pad="<|endoftext|>")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    images = Glm4vImageProcessorPil(size={"shortest_edge": 56 * 56, "longest_edge": 112 * 112})
    processor = Glm4vProcessor(image_processor=images, tokenizer=tokenizer, video_processor=Glm4vVideoProcessor(),
                               chat_template=GLM_TEMPLATE)  # fmt: skip
    text = {
        "vocab_size": len(tokenizer), "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
        "max_position_embeddings": MAX_POSITIONS, "pad_token_id": ids["<|endoftext|>"],
        "eos_token_id": [ids["<|endoftext|>"], ids["<|user|>"]],
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 10000.0,
                            "partial_rotary_factor": 1.0},
    }  # fmt: skip
    vision = {"depth": LAYERS, "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_heads": HEADS,
              "out_hidden_size": HIDDEN, "patch_size": 14, "spatial_merge_size": 2, "image_size": 112}  # fmt: skip
    config = GlmOcrConfig(
        text_config=text, vision_config=vision, architectures=["GlmOcrForConditionalGeneration"],
        image_token_id=ids["<|image|>"], video_token_id=ids["<|video|>"], image_start_token_id=ids["<|begin_of_image|>"],
        image_end_token_id=ids["<|end_of_image|>"], video_start_token_id=ids["<|begin_of_video|>"],
        video_end_token_id=ids["<|end_of_video|>"],
    )  # fmt: skip
    _save(folder, config, processor, {"architecture": "glm_ocr", "vocab_size": len(tokenizer)})


#: Qwen3.5's shape: Qwen3-VL's, and a generation prompt that closes an empty think block when
#: ``enable_thinking`` is false (the checkpoints' template does this; LightOnOCR-3 and
#: Infinity-Parser2 send ``chat_template_kwargs: {"enable_thinking": false}``).
QWEN3_5_TEMPLATE = QWEN3_VL_TEMPLATE.replace(
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}",
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- if enable_thinking is defined and enable_thinking "
    "is false %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}",
)
assert QWEN3_5_TEMPLATE != QWEN3_VL_TEMPLATE


def build_qwen3_5(folder: Path, *, moe: bool = False) -> None:
    """Qwen3.5 (``Qwen3_5ForConditionalGeneration``, or the mixture of experts
    ``Qwen3_5MoeForConditionalGeneration``): Qwen3-VL's processor and vision encoder, a decoder
    mixing gated-delta-net (linear attention) and full-attention layers."""
    from transformers import Qwen3_5Config, Qwen3_5MoeConfig, Qwen3VLProcessor, Qwen3VLVideoProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    specials = [*QWEN_SPECIALS, "<think>", "</think>", "<tool_call>", "</tool_call>"]
    tokenizer = build_tokenizer(specials, eos="<|im_end|>", pad="<|endoftext|>")
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    images = Qwen2VLImageProcessorPil(min_pixels=64 * 64, max_pixels=128 * 128, patch_size=16, merge_size=2)
    processor = Qwen3VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(), chat_template=QWEN3_5_TEMPLATE
    )
    # The linear-attention heads are 128 wide: vLLM's CPU gated-delta-net kernel refuses others
    # ("Unexpected head dim size, 32").
    text = _qwen_text(
        tokenizer, ids, head_dim=HEAD_DIM, layer_types=["linear_attention", "full_attention"],
        linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=HEADS,
        linear_num_value_heads=HEADS, linear_conv_kernel_dim=4, partial_rotary_factor=1.0,
        max_position_embeddings=65_536,  # Infinity-Parser2's context (its recipe's --max-model-len)
    )  # fmt: skip
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_interleaved": True, "partial_rotary_factor": 1.0}
    if moe:
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=HIDDEN,
                    shared_expert_intermediate_size=HIDDEN)
    vision = {
        "depth": LAYERS, "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN, "num_heads": HEADS,
        "out_hidden_size": HIDDEN, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
        "num_position_embeddings": 64,
    }  # fmt: skip
    config_class, arch = (Qwen3_5MoeConfig, "Qwen3_5MoeForConditionalGeneration") if moe else (
        Qwen3_5Config, "Qwen3_5ForConditionalGeneration")
    config = config_class(text_config=text, vision_config=vision, architectures=[arch], **_qwen_tokens(ids))
    name = "qwen3_5_moe" if moe else "qwen3_5"
    _save(folder, config, processor, {"architecture": name, "vocab_size": len(tokenizer)})


def build_idefics3(folder: Path) -> None:
    """The Idefics3 of :mod:`tests.vllm_real.tiny_vlm` (random weights saved), built here so that
    one process imports transformers and torch for every tiny model of the tier."""
    from tests.vllm_real import tiny_vlm

    tiny_vlm.build(folder)
    (folder / "tiny_model.json").write_text(json.dumps({"architecture": "idefics3"}))


#: Every architecture this module builds, by name.
BUILDERS: dict[str, Callable[[Path], None]] = {
    "idefics3": build_idefics3,
    "qwen2_5_vl": build_qwen2_5_vl,
    "qwen3_vl": build_qwen3_vl,
    "qianfan_ocr": build_qianfan_ocr,
    "hunyuan_vl": build_hunyuan_vl,
    "paddleocr_vl": build_paddleocr_vl,
    "lightonocr": build_lightonocr,
    "glm_ocr": build_glm_ocr,
    "qwen3_5": build_qwen3_5,
    "qwen3_5_moe": lambda folder: build_qwen3_5(folder, moe=True),
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


def warm_model_info(folders: list[Path]) -> list[str]:
    """Write vLLM's model-info cache for the architectures of ``folders`` in this process.

    A vLLM server that finds no cached model info for its architecture inspects the model class
    in a subprocess of its own, which imports vLLM and torch again: 8.5 CPU-seconds a start
    measured on this tier's 2-core machines, once per architecture on a machine whose cache
    (``VLLM_CACHE_ROOT/modelinfos``) is new, such as CI's. Here, with torch already imported
    for the builds, all of them cost one import of vLLM's registry. The cache is vLLM's own
    (``vllm/model_executor/models/registry.py``: ``_LazyRegisteredModel.inspect_model_cls``,
    keyed by a hash of the model's module), so a stale or missing entry only costs the server
    its own inspection again; the subprocess exists to keep CUDA out of the server's process,
    and there is none here. Returns the architectures inspected (none when all were cached).
    """
    wanted = {arch for folder in folders
              for arch in json.loads((folder / "config.json").read_text()).get("architectures", [])}  # fmt: skip
    # vLLM's default cache root (vllm/envs.py, VLLM_CACHE_ROOT), worked out here so that a machine
    # whose entries are all cached does not import vLLM (about 6 CPU-s) to learn it.
    root = Path(os.environ.get("VLLM_CACHE_ROOT") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm")
    cached = {path.stem.rsplit("-", 1)[-1] for path in (root / "modelinfos").glob("*.json")}
    missing = sorted(wanted - cached)
    if not missing:
        return []
    from vllm.model_executor.models import registry

    registry._run_in_subprocess = lambda fn: fn()  # type: ignore[assignment]  # in this process, not a new one
    inspected = []
    for arch in missing:
        model = registry.ModelRegistry.models.get(arch)
        if model is not None:
            model.inspect_model_cls()
            inspected.append(arch)
    return inspected


if __name__ == "__main__":
    built = build(sys.argv[1] if len(sys.argv) > 1 else "tiny-models", sys.argv[2:] or None)
    for name, path in built.items():
        print(name, path)
    try:
        print("model info inspected:", ", ".join(warm_model_info(list(built.values()))) or "none (cached)")
    except Exception as exc:  # noqa: BLE001 - a saving, not a check: vLLM then inspects in its own subprocess
        print(f"model info not written ({type(exc).__name__}: {exc}); each server inspects its model itself",
              file=sys.stderr)
