"""A vision projector (`mmproj` GGUF) through llama.cpp's mtmd: images into embedding rows the target
evaluates in place of tokens. Owns the `mtmd_context *` and every mtmd chunk it made.

An image is a run of *image ids* in a prompt's token list: negative numbers no vocabulary has, one
per embedding row, made from the image's content hash. The prompt cache, prefix sharing and the
round compare token lists, so the same image matches itself and a different one does not (as
llama-server keys its cache on an image chunk's id). `Context` turns a run of image ids back into
rows with `rows()`; a context without a projector (the draft) reads each as a filler token. A draft's
own projector follows the target's (`follows=`): it is handed every image under the same ids, so the
draft's context turns them into its own rows.

With an M-RoPE projector (Qwen-VL's, Qwen3.5's) an image's rows sit on a 2-D grid of positions and
the image advances the text's position by `n_pos` (max(width, height) in patches), not by its row
count: `place()` gives those positions, and llama.Context keeps each row's position (its one
index -> position map), so nothing else in the engine knows.
"""

from __future__ import annotations

import collections
import ctypes
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import llama_cpp as C
import numpy as np

from localspec.errors import LocalspecError
from localspec.gguf.projector import projector_facts
from localspec.images import BadImage, Image
from localspec.llama.log import _LOG_CALLBACK, default_threads, init_backend, last_error, log_mark, log_since
from localspec.llama.model import Model
from localspec.llama.owner import Owner

ID_BITS = 13  # an image chunk's rows are ids -(1 + (index << 13) + row): 8192 rows at most
MAX_ROWS = 1 << ID_BITS
MAX_INDEX = (2**31 - 1) >> ID_BITS  # image chunks named at once (ids are int32 in the caches)
RECENT = 16  # images whose embeddings stay encoded after their requests end


def is_image_id(token: int) -> bool:
    return token < 0


@dataclass(frozen=True)
class ImageRun:
    """One image chunk in a prompt: its ids (one per embedding row, in order). Holding it keeps the
    chunk (and, once encoded, its rows) alive."""

    ids: tuple[int, ...]
    chunk: object = field(compare=False, repr=False)


class _Chunk(Owner):
    """One mtmd image chunk: owned until encoded, then only its embedding rows are kept."""

    def __init__(self, ptr, n_tokens: int, layout: tuple | None = None) -> None:  # noqa: ANN001 - an mtmd chunk
        self._ptr, self.n_tokens = ptr, n_tokens
        self.rows: np.ndarray | None = None
        self.layout = layout  # M-RoPE: (row positions at start 0, their step per start)

    def close(self) -> None:
        if self._ptr:
            _mtmd().mtmd_input_chunk_free(self._ptr)
            self._ptr = None


class Projector(Owner):
    """The mmproj file over a loaded text model; one per target. Thread-safe: requests tokenize their
    images on their own threads, the engine thread encodes them."""

    _ctx = None

    def __init__(
        self,
        path: str | Path,
        model: Model,
        *,
        n_threads: int | None = None,
        use_gpu: bool = True,
        follows: Projector | None = None,
    ):
        self._lock = threading.RLock()  # first: close() may run on a half-made projector
        self.follower: Projector | None = None  # the draft's projector, fed every image this one is
        self._chunks: weakref.WeakValueDictionary[int, _Chunk] = weakref.WeakValueDictionary()
        self.path = Path(path)
        self.facts = projector_facts(self.path)
        M = _mtmd()
        init_backend()
        M.mtmd_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))  # into our log, like llama.cpp's own lines
        M.mtmd_helper_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
        params = M.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads or default_threads()
        params.print_timings = False
        mark = log_mark()
        ctx = M.mtmd_init_from_file(str(self.path).encode(), model.ptr, params)
        self.load_log = log_since(mark)
        if not ctx:
            raise LocalspecError(f"llama.cpp could not load the projector {self.path}: {last_error(mark)}")
        self._ctx = ctx
        if not M.mtmd_support_vision(ctx):
            self.close()
            raise LocalspecError(f"{self.path} is not a vision projector (no image encoder in it)")
        self.mrope = bool(M.mtmd_decode_use_mrope(ctx))  # images on a 2-D position grid (Qwen-VL)
        self.non_causal = bool(M.mtmd_decode_use_non_causal(ctx, None))  # Gemma 3: images see both ways
        self.n_embd = int(C.llama_model_n_embd_inp(model.ptr))
        self._marker = M.mtmd_default_marker()
        self._numbers = _Numbering(self._chunks)  # (image hash, chunk ordinal) -> index, an LRU
        self._recent: collections.OrderedDict[str, tuple] = collections.OrderedDict()  # hash -> pieces
        if follows is not None:
            try:
                follows._adopt(self)
            except BaseException:
                self.close()
                raise

    def _adopt(self, follower: Projector) -> None:
        """Feed `follower` (the draft's projector) every image this one takes, under the same ids, so
        the draft's context decodes them into its own rows and its token list stays the target's.
        Refused, one line, when the two would cut an image differently."""
        follower._lock, follower._numbers = self._lock, self._numbers  # one numbering, one lock
        self._numbers.live.append(follower._chunks)
        probe = Image(np.full((64, 64, 3), 128, np.uint8), "localspec:projector-probe")
        with self._lock:
            _paired(self._own(probe), follower._own(probe), follower.path)
        self.follower = follower

    def watch(self, ctx: object) -> None:
        """`ctx` caches this projector's image ids (the target's context, a draft's reading them as
        fillers): an index they hold is never given to another image."""
        self._numbers.caches.append(weakref.ref(ctx))

    def close(self) -> None:
        with self._lock:
            for chunk in list(self._chunks.values()):
                chunk.close()
            if self._ctx:
                _mtmd().mtmd_free(self._ctx)
                self._ctx = None

    @property
    def ctx(self):  # noqa: ANN201 - an mtmd_context pointer
        if not self._ctx:
            raise LocalspecError("this projector is closed")
        return self._ctx

    # -- images in -------------------------------------------------------------------------------
    def pieces(self, image: Image) -> tuple:
        """The image as its model takes it: text token lists (a model's own image markers) and
        `ImageRun`s, in order. The same image (by content) gets the same ids every time; the
        result keeps its chunks alive, so hold it until the prompt is in the cache."""
        with self._lock:
            hit = self._recent.pop(image.digest, None) or self._tokenize(image)
            self._recent[image.digest] = hit
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
            return hit

    def _tokenize(self, image: Image) -> tuple:
        pieces = self._own(image)
        if self.follower is None:
            return pieces
        return _paired(pieces, self.follower._own(image), self.follower.path)

    def _own(self, image: Image) -> tuple:
        M = _mtmd()
        data = np.ascontiguousarray(image.pixels, np.uint8)
        bitmap = M.mtmd_bitmap_init(
            image.width, image.height, data.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        )
        chunks = M.mtmd_input_chunks_init()
        try:
            if not bitmap or not chunks:
                raise LocalspecError("mtmd could not allocate an image")
            text = M.mtmd_input_text(self._marker, len(self._marker), False, True)
            mark = log_mark()
            rc = M.mtmd_tokenize(
                self.ctx, chunks, ctypes.byref(text), (M.mtmd_bitmap_p_ctypes * 1)(bitmap), 1
            )
            if rc != 0:
                raise BadImage(f"the projector could not take this image: {last_error(mark)}")
            return self._pieces_of(chunks, image.digest)
        finally:
            if chunks:
                M.mtmd_input_chunks_free(chunks)
            if bitmap:
                M.mtmd_bitmap_free(bitmap)

    def _pieces_of(self, chunks, digest: str) -> tuple:  # noqa: ANN001
        M = _mtmd()
        pieces: list = []
        n_runs = 0
        for i in range(M.mtmd_input_chunks_size(chunks)):
            ch = M.mtmd_input_chunks_get(chunks, i)
            if M.mtmd_input_chunk_get_type(ch) == M.MTMD_INPUT_CHUNK_TYPE_TEXT:
                n = ctypes.c_size_t()
                toks = M.mtmd_input_chunk_get_tokens_text(ch, ctypes.byref(n))
                pieces.append([int(toks[j]) for j in range(n.value)])
                continue
            n_tok = int(M.mtmd_input_chunk_get_n_tokens(ch))
            if not 0 < n_tok <= MAX_ROWS:
                raise BadImage(
                    f"an image of {n_tok} embedding rows is more than localspec takes ({MAX_ROWS})"
                )
            index = self._numbers.index_of((digest, n_runs))
            n_runs += 1
            chunk = self._chunks.get(index)
            if chunk is None:
                chunk = _Chunk(M.mtmd_input_chunk_copy(ch), n_tok, _layout(ch, n_tok) if self.mrope else None)
                self._chunks[index] = chunk
            base = -(1 + (index << ID_BITS))
            pieces.append(ImageRun(tuple(range(base, base - n_tok, -1)), chunk))
        return tuple(pieces)

    # -- rows out ----------------------------------------------------------------------------------
    def rows(self, ids: Sequence[int]) -> np.ndarray:
        """The embedding rows of image ids (any run, any part of an image), encoding each image the
        first time its rows are asked for. On the engine thread."""
        ids = np.asarray(ids, np.int64)
        neg = -ids - 1
        index, row = neg >> ID_BITS, neg & (MAX_ROWS - 1)
        out = np.empty((len(ids), self.n_embd), np.float32)
        for idx in np.unique(index).tolist():
            at = index == idx
            out[at] = self._encoded(idx)[row[at]]
        return out

    def place(self, ids: Sequence[int], start: int) -> tuple[np.ndarray, np.ndarray]:
        """M-RoPE: the positions of image ids of one image whose first row is at position `start`:
        (4, n) sections as a llama_batch takes them (t, y, x, z, as mtmd's helper orders them), and
        where each row's successor starts (the text after the image: start + n_pos)."""
        ids = np.asarray(ids, np.int64)
        neg = -ids - 1
        base, step = self._chunk(int(neg[0] >> ID_BITS)).layout
        row = neg & (MAX_ROWS - 1)
        at = base + start * step  # (rows + 1, 4): the extra row is where the text goes on
        return at[row][:, [0, 2, 1, 3]].T.copy(), at[row + 1, 0]

    def _chunk(self, index: int) -> _Chunk:
        chunk = self._chunks.get(index)
        if chunk is None:
            raise LocalspecError("an image of this prompt is no longer held (its request ended)")
        return chunk

    def _encoded(self, index: int) -> np.ndarray:
        with self._lock:
            chunk = self._chunk(index)
            if chunk.rows is None:
                M = _mtmd()
                mark = log_mark()
                if M.mtmd_encode_chunk(self.ctx, chunk._ptr) != 0:
                    raise LocalspecError(f"the projector failed to encode an image: {last_error(mark)}")
                embd = M.mtmd_get_output_embd(self.ctx)
                chunk.rows = np.ctypeslib.as_array(embd, shape=(chunk.n_tokens, self.n_embd)).copy()
                chunk.close()  # the preprocessed pixels are not needed again
            return chunk.rows


class _Numbering:
    """Which index names each image chunk, as an LRU: a new chunk takes a fresh index while there
    are any, then the least recently used one that nothing holds - no request (its chunk is alive)
    and no cache (a context's cached ids: a prefix holding the old image's rows must never match
    the new one's). A lifetime counter refused every new image once 262,143 had been seen."""

    def __init__(self, chunks: weakref.WeakValueDictionary) -> None:
        self.index: collections.OrderedDict[tuple[str, int], int] = collections.OrderedDict()
        self.fresh = 0
        self.live = [chunks]  # each projector's chunks by index (alive: a request holds them)
        self.caches: list[weakref.ref] = []

    def index_of(self, key: tuple[str, int]) -> int:
        index = self.index.get(key)
        if index is not None:
            self.index.move_to_end(key)
        else:
            index = self.index[key] = self._free()
        return index

    def _free(self) -> int:
        if self.fresh < MAX_INDEX:
            self.fresh += 1
            return self.fresh - 1
        held = {i for chunks in self.live for i in chunks.keys()} | self._cached()
        for key, index in self.index.items():  # the least recently used first
            if index not in held:
                del self.index[key]
                return index
        raise LocalspecError(f"{MAX_INDEX} images are in use at once; retry when some requests have ended")

    def _cached(self) -> set[int]:
        out: set[int] = set()
        for ref in self.caches:
            ctx = ref()
            for seq in range(ctx.n_seq) if ctx is not None else ():
                ids = np.asarray(ctx.cached_tokens(seq), np.int64)
                out.update(((-ids[ids < 0] - 1) >> ID_BITS).tolist())
        return out


def _paired(ours: tuple, theirs: tuple, path: Path) -> tuple:
    """The target's pieces of an image, their runs holding the draft's chunks too, once both
    projectors cut it alike (the same text markers, the same rows: with one numbering, equal ids)."""
    cut = [[p.ids if isinstance(p, ImageRun) else list(p) for p in ps] for ps in (ours, theirs)]
    if cut[0] != cut[1]:
        rows = [sum(len(p.ids) for p in ps if isinstance(p, ImageRun)) for ps in (ours, theirs)]
        raise BadImage(
            f"the draft's projector {path.name} cuts an image into {rows[1]} rows, the target's into "
            f"{rows[0]}{'' if rows[0] != rows[1] else ' (with other markers)'}: the draft must read the "
            "target's prompt; run without --draft-mmproj"
        )
    return tuple(
        ImageRun(a.ids, (a.chunk, b.chunk)) if isinstance(a, ImageRun) else a for a, b in zip(ours, theirs)
    )


def _layout(ch, n_tok: int) -> tuple:  # noqa: ANN001 - an mtmd_input_chunk pointer
    """An M-RoPE image's row positions at start 0 and how each moves with the start (mtmd's
    decoder_pos is affine in it: 1 for the grid's coordinates, 0 for an unused section), so the
    image can be placed anywhere once its chunk is freed."""
    M = _mtmd()
    tokens = M.mtmd_input_chunk_get_tokens_image(ch)
    at = []
    for start in (0, 1):
        out = (M.mtmd_decoder_pos * n_tok)()
        M.mtmd_helper_image_get_decoder_pos(tokens, start, out)
        at.append(np.frombuffer(out, np.uint32).reshape(n_tok, 4).astype(np.int64))  # t, x, y, z
    n_pos = int(M.mtmd_input_chunk_get_n_pos(ch))
    # one row past the last: where the image's successor starts (start + n_pos)
    base = np.vstack([at[0], [n_pos, 0, 0, 0]])
    step = np.vstack([at[1] - at[0], [1, 0, 0, 0]])
    return base, step


def _mtmd():  # noqa: ANN202 - the module: libmtmd is loaded only when a projector is used
    import llama_cpp.mtmd_cpp as M  # noqa: PLC0415

    return M
