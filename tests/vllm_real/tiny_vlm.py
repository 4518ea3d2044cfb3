"""A tiny randomly initialised Idefics3 (SmolVLM's architecture) built on the spot, for real vLLM.

Everything comes from here, nothing from a hub: a byte-level BPE tokenizer trained on a few
sentences plus Idefics3's special tokens, a PIL image processor with 32-pixel tiles, a chat
template, and a config with two tiny layers on each side (head size 32: vLLM's CPU attention
needs at least that). About 200k parameters; its text is garbage, which is the point: the
pipeline must keep whatever the model says.

Why Idefics3 and not Qwen2-VL or DeepSeek-OCR: vLLM's modules for those (and the DeepSeek-OCR
n-gram logits processor) import torchvision, and no CPU torchvision for torch 2.13 installs on
these machines; ``vllm/model_executor/models/idefics3.py`` imports none.

Run as ``python -m tests.vllm_real.tiny_vlm DIR`` to build one by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Text and vision tower sizes. vLLM's CPU attention wants head_size >= 32.
HIDDEN = 64
HEADS = 2
LAYERS = 2
#: Vision tiles of 32 px cut into 8-px patches: 16 patches, pixel-shuffled by 2 -> 4 image tokens.
IMAGE_SIZE = 32
PATCH_SIZE = 8
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
#: The production presets ask for --max-model-len 8192 (DeepSeek-OCR's context): allow it.
MAX_POSITIONS = 8192

BOS = "<|begin_of_text|>"
EOS = "<end_of_utterance>"
PAD = "<|pad|>"
UNK = "<unk>"
IMAGE_TOKENS = ["<fake_token_around_image>", "<image>", "<global-img>"] + [
    f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)
]

CORPUS = [
    "Convert this page to markdown. Output only the markdown.",
    "Describe this image in detail.",
    "The quick brown fox jumps over the lazy dog.",
    "Section 1.1 archive batch caption column document engine figure graph header index.",
    "| a | b |\n| --- | --- |\n| 1 | 2 |",
    "# Title\n\nSome text with *emphasis* and a [link](http://example.com).",
    "User: Assistant: 0123456789 ,.;:!? ()[]{} <>",
]

# Idefics3's own template (HuggingFaceM4/Idefics3-8B-Llama3), OpenAI-style content lists.
CHAT_TEMPLATE = (
    "<|begin_of_text|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def build_tokenizer():
    """A byte-level BPE tokenizer trained on :data:`CORPUS`, with Idefics3's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [UNK, BOS, EOS, PAD, *IMAGE_TOKENS]
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=IMAGE_TOKENS,
        model_max_length=MAX_POSITIONS,
    )


def build(folder: str | Path, seed: int = 0) -> Path:
    """Write the tiny model (weights, config, tokenizer, processor, chat template) to ``folder``."""
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": IMAGE_SIZE},
        max_image_size={"longest_edge": IMAGE_SIZE},
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )
    vocab = len(tokenizer)
    text_config = {
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": HIDDEN // HEADS,
        "max_position_embeddings": MAX_POSITIONS,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": False,
    }
    vision_config = {
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE,
        "num_channels": 3,
    }
    config = Idefics3Config(
        text_config=text_config,
        vision_config=vision_config,
        scale_factor=SCALE_FACTOR,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = Idefics3ForConditionalGeneration(config).eval()
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    (folder / "tiny_vlm.json").write_text(json.dumps({
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": vocab,
        "image_seq_len": IMAGE_SEQ_LEN,
    }))
    return folder


if __name__ == "__main__":
    out = build(sys.argv[1] if len(sys.argv) > 1 else "tiny-idefics3")
    print(out, (out / "tiny_vlm.json").read_text())
