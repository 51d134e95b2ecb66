"""Build a Hugging Face ``tokenizer.json`` from a GGUF file's tokenizer metadata.

Also: stream SentencePiece byte fallback as SentencePiece decodes it.
"""

from __future__ import annotations

import codecs
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

# GGUF token types (llama.cpp's llama_token_type): 3 = control, 4 = user-defined.
SPECIAL_TYPES = (3, 4)


# llama.cpp's splitting regexes (llama-vocab.cpp) for the pre-types that are not
# GPT-2's: Llama 3's groups digits by three, Qwen2's splits every digit.
_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
    r"\p{N}DIGITS| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Llama 3's pre-types: llama.cpp also sets ignore_merges (a whole word in the vocabulary
# is one token, as in their tokenizer.json) and, where the file does not say, a BOS.
LLAMA3_PRES = ("llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral")
# Mistral's tekken (NeMo, Small 3, Ministral): the same two, its own regex (the one in
# its tokenizer.json; llama.cpp writes the case classes as lookaheads).
TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
    r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_WHOLE_WORDS = (*LLAMA3_PRES, "tekken")
# Llama 3's turns end on these as well as on the file's one eos (llama.cpp stops on each).
LLAMA3_ENDS = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
# And SentencePiece models' turns on these control tokens (Gemma's, Phi-3's), which
# llama.cpp also treats as ends of generation when the file does not name them.
SPM_ENDS = ("<end_of_turn>", "<|end|>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>")
_REGEX_PRES = {
    **dict.fromkeys(LLAMA3_PRES, _SPLIT.replace("DIGITS", "{1,3}")),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), _SPLIT.replace("DIGITS", "")),
    "tekken": TEKKEN,
}


def _pre_tokenizer(pre: str):
    from tokenizers import Regex
    from tokenizers import pre_tokenizers as pt

    byte_level = pt.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    # llama.cpp splits single digits first for these, then applies the GPT-2 regex.
    if pre in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"):
        return pt.Sequence([pt.Digits(individual_digits=True), byte_level])
    if pre in ("gpt-2", "gpt2", "phi-2", "default", "mpt", "olmo", "jais"):
        return byte_level
    if pre in _REGEX_PRES:  # as these models' own tokenizer.json has it
        split = pt.Split(Regex(_REGEX_PRES[pre]), behavior="isolated", invert=False)
        return pt.Sequence([split, pt.ByteLevel(add_prefix_space=False, use_regex=False)])
    raise ValueError(
        f"GGUF tokenizer pre-type {pre!r} is not supported yet "
        "(supported: the gpt2, smollm, llama-bpe, qwen2 and tekken families)"
    )


def _spm(md: dict, tokens: list[str], types: list[int]):
    """A SentencePiece vocabulary (``tokenizer.ggml.model`` ``llama``) as a BPE ``Tokenizer``.

    llama.cpp (like SentencePiece) merges the adjacent pair whose joined piece scores
    highest; BPE merges ranked by that score do the same. Characters outside the
    vocabulary fall back to the ``<0xXX>`` byte tokens. A space is put in front of the
    text, and after every special token, as llama.cpp does with ``add_space_prefix``
    (Hugging Face's "legacy" Llama tokenizer).
    """
    from tokenizers import Tokenizer, decoders, models, normalizers

    scores = md.get("tokenizer.ggml.scores")
    scores = scores.tolist() if hasattr(scores, "tolist") else list(scores or [0.0] * len(tokens))
    vocab = {t: i for i, t in enumerate(tokens)}
    # Pieces that merges may make: normal and user-defined ones (not control, unknown,
    # unused or byte tokens), best score first, ties by id.
    pieces = [(sc, t) for t, sc, ty in zip(tokens, scores, types) if ty in (1, 4) and len(t) > 1]
    merges = []
    for _, piece in sorted(pieces, key=lambda p: -p[0]):
        pairs = [(piece[:i], piece[i:]) for i in range(1, len(piece))]
        pairs = [p for p in pairs if p[0] in vocab and p[1] in vocab]
        merges += sorted(pairs, key=lambda p: (vocab[p[0]], vocab[p[1]]))
    unk = md.get("tokenizer.ggml.unknown_token_id")
    unk_token = tokens[int(_scalar(unk))] if unk is not None else None
    tok = Tokenizer(
        models.BPE(
            vocab=vocab, merges=merges, unk_token=unk_token, fuse_unk=True, byte_fallback=True
        )
    )
    norm = [normalizers.Replace(" ", "\u2581")]
    if bool(_scalar(md.get("tokenizer.ggml.add_space_prefix", True))):
        norm.insert(0, normalizers.Prepend("\u2581"))
    tok.normalizer = normalizers.Sequence(norm)
    strip = [decoders.Strip(content=" ", left=1, right=0)] if len(norm) > 1 else []
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), *strip]
    )
    return tok


def _scalar(v: Any):
    return v.item() if hasattr(v, "item") else v


def write_tokenizer(md: dict, out: Path) -> None:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``.

    Args:
        md: Metadata from ``mx.load(path, return_metadata=True)``.
        out: Target directory.

    Raises:
        ValueError: For tokenizer models other than byte-level BPE (``gpt2``) and
            SentencePiece (``llama``: Llama 2, Mistral, TinyLlama).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors

    arch = str(md.get("general.architecture", "llama"))
    kind = md.get("tokenizer.ggml.model")
    if kind not in ("gpt2", "llama"):
        raise ValueError(
            f"GGUF tokenizer model {kind!r} is not supported (only 'gpt2' byte-level BPE and"
            " 'llama' SentencePiece)"
        )
    tokens: list[str] = list(md["tokenizer.ggml.tokens"])
    types = md.get("tokenizer.ggml.token_type")
    types = types.tolist() if hasattr(types, "tolist") else list(types or [1] * len(tokens))

    pre = str(md.get("tokenizer.ggml.pre", "default"))
    llama3, whole = pre in LLAMA3_PRES, pre in _WHOLE_WORDS
    if kind == "llama":
        tok = _spm(md, tokens, types)
    else:
        merges = [tuple(m.split(" ", 1)) for m in md["tokenizer.ggml.merges"]]
        vocab = {t: i for i, t in enumerate(tokens)}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, ignore_merges=whole))
        tok.pre_tokenizer = _pre_tokenizer(pre)
        tok.decoder = decoders.ByteLevel()
    specials = [t for t, ty in zip(tokens, types) if ty in SPECIAL_TYPES]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])

    def name(key: str) -> str | None:
        i = md.get(f"tokenizer.ggml.{key}_token_id")
        return None if i is None else tokens[int(_scalar(i))]

    bos, eos, unk, pad = name("bos"), name("eos"), name("unknown"), name("padding")
    # llama.cpp's defaults where the file does not say: a BOS for SentencePiece, Llama 3
    # and tekken.
    add_bos = bool(_scalar(md.get("tokenizer.ggml.add_bos_token", whole or kind == "llama")))
    if add_bos and bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0",
            pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, tokens.index(bos))],
        )
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    # Ends of generation besides the eos: the file's eot/eom, and the known turn ends.
    ends = {int(_scalar(i)) for k in ("eot", "eom")
            if (i := md.get(f"tokenizer.ggml.{k}_token_id")) is not None}  # fmt: skip
    if llama3:
        ends |= {tokens.index(t) for t in LLAMA3_ENDS if t in tokens}
    if kind == "llama":
        # Control or user-defined: Phi-3's converter writes <|end|> as the latter.
        ends |= {i for i, t in enumerate(tokens) if t in SPM_ENDS and types[i] in (3, 4)}
    if ends:  # mlx-lm reads the stop ids from here
        eos_id = md.get("tokenizer.ggml.eos_token_id")
        ids = sorted(ends | ({int(_scalar(eos_id))} if eos_id is not None else set()))
        (out / "generation_config.json").write_text(json.dumps({"eos_token_id": ids}))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": unk,
        "pad_token": pad,
        "add_bos_token": add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(_scalar(md.get(f"{arch}.context_length", 2048))),
        "additional_special_tokens": [t for t in specials if t not in (bos, eos, unk, pad)],
    }
    if "tokenizer.chat_template" in md:
        cfg["chat_template"] = str(md["tokenizer.chat_template"])
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=1))
    smap = {
        k: v
        for k, v in (("bos_token", bos), ("eos_token", eos), ("unk_token", unk), ("pad_token", pad))
        if v is not None
    }
    (out / "special_tokens_map.json").write_text(json.dumps(smap, ensure_ascii=False))


def bytes_as_sentencepiece(tok) -> None:
    """Stream a SentencePiece vocabulary's stray bytes as SentencePiece decodes them.

    mlx-lm's SPM detokenizer decodes byte-fallback tokens with Python's "replace",
    which gives one U+FFFD for a whole truncated sequence (``e2 82`` then ``F``: "\ufffdF");
    SentencePiece and Hugging Face's ByteFallback give one a byte ("\ufffd\ufffdF"), so the
    streamed text differed from the decoded one. Any model's tokenizer, in place.
    """
    from mlx_lm.tokenizer_utils import SPMStreamingDetokenizer

    if type(getattr(tok, "_detokenizer", None)) is SPMStreamingDetokenizer:
        tok._detokenizer.__class__ = _per_byte_spm()


def _per_byte(err: UnicodeDecodeError):
    return "\ufffd" * (err.end - err.start), err.end


codecs.register_error("mlxnb_per_byte", _per_byte)


@lru_cache(maxsize=1)
def _per_byte_spm():
    from mlx_lm.tokenizer_utils import SPMStreamingDetokenizer

    class PerByteSPM(SPMStreamingDetokenizer):
        def _try_flush(self, force=False):
            # mlx-lm's own, with one U+FFFD a byte that is not UTF-8
            text = self._unflushed.replace(self._sep, b" ").decode("utf-8", "mlxnb_per_byte")
            if not force and text.endswith("\ufffd"):
                return
            if not self.text and self.trim_space and text and text[0] == " ":
                text = text[1:]
            self.text += text
            self._unflushed = b""

    return PerByteSPM
