"""The engine: owns the loaded pair (loader.py) and its tuner pool, and serves requests (`submit` ->
`Handle`; `stream` and `generate` on top) from one engine thread (thread.py) that runs decoding
rounds over every active request at once (scheduler.py, decode/round.py). A request reuses the KV
cache of the slot holding the longest common prompt prefix."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Iterator, Sequence, TypeVar

import numpy as np

from localspec import draft_kinds, llama
from localspec.chat import media
from localspec.chat import template as chat
from localspec.config.settings import AUTO_K_MAX, REQUEST, Settings
from localspec.decode.infill import Infill
from localspec.decode.sources import remembered
from localspec.draft_len.pool import TunerPool
from localspec.engine import embed, embed_only, placement
from localspec.engine.facade import ModelFacts, TextModel, facts_of
from localspec.engine.loader import LoadedPair, load_pair, memory_key
from localspec.engine.prompt_disk import CLOSE_WAIT_S, open_disk
from localspec.engine.request import Handle, Request
from localspec.engine.scheduler import Scheduler
from localspec.engine.thread import Yielding, load_then_serve
from localspec.engine.types import Chunk, Response
from localspec.errors import Cancelled, GenerationFailed, LocalspecError, PromptTooLong
from localspec.evaluator import Evaluator
from localspec.gguf.pooling import is_embedding_model
from localspec.images import Image
from localspec.text_input import require_text

T = TypeVar("T")


class Engine:
    def __init__(self, settings: Settings, *, log: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self._log = log or (lambda msg: None)
        if settings.target is None:
            raise LocalspecError("no target model: pass --target PATH.gguf or --pair DIR")
        self._closed = False
        self._pair: LoadedPair | None = None
        self._embedder: Any = None  # llama.Embedder, made on the first embed() (at load: embeds_only)
        self.embeds_only = False  # an embedding model (gguf/pooling.py): no generation (embed_only.py)
        self._infill: Infill | None = None  # the infill sampler's view of the vocabulary
        self.calibration = "none"  # measured | remembered | none (no draft, or a fixed K)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        # every decode of this engine, the load's warm-up and calibration included, runs on its one
        # thread (thread.py says why)
        loaded: Future = Future()
        self._thread: threading.Thread | None = threading.Thread(
            target=load_then_serve,
            args=([self._load_scheduler], loaded, self._inbox),
            name="localspec-engine",
            daemon=True,
        )
        self._thread.start()
        try:
            loaded.result()
        except BaseException:
            if not loaded.done():  # interrupted while loading: let the load end, then the thread
                self._inbox.put(None)
                self._thread.join()
            self._thread = None
            if self._pair is not None:
                self._pair.close()
            raise

    def _load_scheduler(self) -> Scheduler | embed_only.NoRounds:
        if is_embedding_model(self.settings.target):
            self.embeds_only = True
            self._pair, self._embedder = embed_only.load(self.settings, self._log)
            self.tuners, self._sched = None, embed_only.NoRounds(embed_only.not_generative(self.target))
            return self._sched
        self._pair = pair = load_pair(self.settings, log=self._log)
        kind = draft_kinds.kind_of(self.settings)
        self.tuners, self.calibration = TunerPool.for_pair(
            self.settings, pair.target_ctx, pair.draft_ctx, memory_key=memory_key(pair), log=self._log,
            own_cache=kind is None or kind.own_cache,
        )  # fmt: skip
        self.prompt_disk = open_disk(self.settings, pair, self._log)
        if self.settings.cache_reuse and not pair.target_ctx.can_shift:
            raise LocalspecError(
                f"--cache-reuse moves cached tokens to new positions; this model's {pair.target_ctx.memory_kind} "
                "memory cannot shift them (a recurrent state is not per position): leave --cache-reuse at 0"
            )
        stop = llama.Interrupt()  # a cancel stops the decode it leaves with nobody waiting on
        for ctx in pair.contexts():
            stop.attach(ctx.ptr)
        self._sched = Scheduler(
            pair.target_ctx, pair.draft_ctx, self.settings.parallel, prefill_alone=self.settings.n_batch,
            disk=self.prompt_disk, drafting=draft_kinds.source_of(self.settings), kept=remembered(self.settings),
            stop=stop, cache_reuse=self.settings.cache_reuse,
        )  # fmt: skip
        return self._sched

    # -- the facade: what serving knows of the model (facade.py) -------------------------------
    @property
    def text(self) -> TextModel:
        """The target's text API: tokenize, spell, the template and the FIM tokens."""
        return self._pair.target

    def facts(self) -> ModelFacts:
        """The loaded target's facts, for a model card."""
        s = self.settings
        n_ctx = s.embed_ctx if self.embeds_only else self._pair.target_ctx.n_ctx
        return facts_of(self.target, n_ctx, embeds_only=self.embeds_only, vision=self.vision)

    def not_generative(self) -> LocalspecError | None:
        """Why this engine generates nothing (an embedding model served alone), or None."""
        return embed_only.not_generative(self.target) if self.embeds_only else None

    # -- the loaded pair, for the tools below the facade (the CLI, the benchmarks, the tests) --
    @property
    def target(self) -> llama.Model:
        return self._pair.target

    @property
    def target_ctx(self) -> llama.Context:
        return self._pair.target_ctx

    @property
    def draft(self) -> llama.Model | None:
        return self._pair.draft

    @property
    def draft_ctx(self) -> Evaluator | None:
        return self._pair.draft_ctx

    @property
    def decision(self) -> placement.Decision | None:
        return self._pair.decision

    @property
    def placement(self) -> placement.PlacementReport | None:
        return self._pair.report

    # -- the engine thread -----------------------------------------------------------------------
    def on_engine_thread(self, fn: Callable[[], T], *, yielding: bool = False) -> T:
        """fn() on the engine thread, between rounds, and its result. Tools that drive target_ctx and
        draft_ctx themselves (traces and timings) go through this, so that every decode stays on one
        thread; called from the engine thread, it just runs fn. `yielding`: work a client waits for
        beside others' decoding (an embeddings pass) takes its turn, a share of the thread (thread.py)."""
        self._check_open()
        if threading.current_thread() is self._thread:
            return fn()
        done = threading.Event()
        box: list[tuple[bool, Any]] = []  # (raised, the result or the exception)

        def cmd() -> None:
            try:
                box.append((False, fn()))
            except BaseException as e:
                box.append((True, e))
            done.set()

        self._inbox.put(Yielding(cmd) if yielding else cmd)
        done.wait()
        raised, value = box[0]
        if raised:
            raise value
        return value

    def clear_cache(self) -> None:
        """Forget the cached prompt prefixes, so the next request pays its full prefill (benchmarks).
        Waits for running requests to finish first."""

        def clear() -> None:
            while self._sched.busy:
                self._sched.step()
            self._sched.clear()

        self.on_engine_thread(clear)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if getattr(self, "_thread", None) is not None:
            self._inbox.put(None)
            self._thread.join()
        if getattr(self, "tuners", None) is not None:
            self.tuners.flush()
        if getattr(self, "prompt_disk", None) is not None:  # the saves still queued reach the disk
            self.prompt_disk.flush(CLOSE_WAIT_S)
        if getattr(self, "_pair", None) is not None:
            self._pair.close()

    def __del__(self) -> None:  # last resort; owners call close()
        try:
            self.close()
        except Exception:
            pass

    def _check_open(self) -> None:
        if self._closed:
            raise LocalspecError("this engine is closed; create a new Engine")

    def _check_generates(self) -> None:
        self._check_open()
        if self.embeds_only:
            raise embed_only.not_generative(self.target)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- prompts ---------------------------------------------------------------------------------
    def tokenize(self, prompt: str | Sequence[int] | list[dict], *, chat_mode: bool = False) -> list[int]:
        """Token ids for a prompt: a string, a list of chat messages, or ids as they are."""
        return self.prompt_of(prompt, chat_mode=chat_mode).ids

    def prompt_of(
        self,
        prompt: str | Sequence[int] | list[dict],
        *,
        chat_mode: bool = False,
        images: Sequence[Image] = (),
        max_images: int | None = None,
    ) -> media.Prompt:
        """A prompt's token ids with its images' ids spliced in (and the images' runs, which must be
        held while the request runs). Chat messages may hold image parts ({"type": "image", "image":
        Image}); `images` go before a string prompt's text."""
        self._check_generates()
        if isinstance(prompt, media.Prompt):  # tokenized here already (a chat's conversation)
            return prompt
        if isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], int):
            if images:
                raise LocalspecError("images go with a text prompt or chat messages, not token ids")
            return media.Prompt(self._checked_ids(prompt))
        marker = media.new_marker()
        if chat_mode or isinstance(prompt, list):
            if isinstance(prompt, list):
                if images:
                    raise LocalspecError("give chat messages their images as content parts")
                messages = prompt
            else:
                parts = [{"type": "image", "image": im} for im in images] + [{"type": "text", "text": prompt}]
                messages = [{"role": "user", "content": parts if images else prompt}]
            messages, images = media.flatten(messages, marker)
            _check_count(images, max_images)
            text, chat_text = self.render_chat(messages), True
        else:
            _check_count(images, max_images)
            text, chat_text = marker * len(images) + require_text(str(prompt)), False
        p = media.tokenize(self.target, self.projector, text, images, marker, chat=chat_text)
        if not p.ids:
            raise LocalspecError("the prompt is empty")
        return p

    def _checked_ids(self, ids: Sequence[int]) -> list[int]:
        """Ids as given, each one the target knows: llama.cpp would refuse the whole batch it rides
        in, and with it every request sharing that decode."""
        n_vocab = self.target.n_vocab
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_vocab:
                raise LocalspecError(
                    f"prompt token {i} is {t!r}, not a token id of this model (0..{n_vocab - 1})"
                )
        return list(ids)

    def render_chat(self, messages: list[dict], **extra: Any) -> str:
        """The conversation as text, through the model's own chat template (generation prompt added);
        `extra` are template variables (tools, enable_thinking, ...)."""
        self._check_generates()
        return chat.render_for(self.target, messages, **extra)

    def tokenize_chat(self, text: str, *, continuation: bool = False) -> list[int]:
        """Tokens of rendered chat text; a continuation of a conversation already tokenized gets no BOS."""
        return chat.tokenize_rendered(self.target, text, continuation=continuation)

    def tokenize_images(self, text: str, images: Sequence[Image], marker: str) -> media.Prompt:
        """Tokens of rendered chat text with an image at each `marker` (chat.media)."""
        return media.tokenize(self.target, self.projector, text, images, marker, chat=True)

    @property
    def projector(self) -> llama.Projector | None:
        return self._pair.projector

    @property
    def vision(self) -> bool:
        """A projector is loaded: prompts may hold images."""
        return self._pair.projector is not None

    # -- generation ------------------------------------------------------------------------------
    def submit(
        self,
        prompt: str | Sequence[int] | list[dict],
        *,
        chat: bool = False,
        keep_special: Sequence[int] = (),
        sink: Callable[[object], None] | None = None,
        settings: Settings | None = None,
        images: Sequence[Image] = (),
        lookup_text: Sequence[int] = (),
        **overrides: Any,
    ) -> Handle:
        """Start a request and return at once: iterate the handle for its chunks, cancel() to stop it.
        Bad input (a prompt that does not fit, bad settings) raises here, before anything is queued.
        `keep_special`: control tokens whose text the output keeps (a chat syntax's markers).
        `sink(item)`: called on the engine thread with each chunk (and the prompt's `Progress` while it
        is evaluated), an error, then None at the end,
        instead of the handle's queue (the server hands them to its event loop; it must not block).
        `settings`: the request's settings, already built from its overrides (by the caller).
        `images`: decoded images (localspec.images) before a string prompt's text; chat messages
        carry theirs as content parts. `lookup_text`: more token ids the lookup may draft from (a
        fill-in-the-middle request's file and other files, where its prompt was cut)."""
        self._check_generates()
        s = settings or (self.settings.override(REQUEST, **overrides) if overrides else self.settings)
        s = self._capped(s)
        p = self.prompt_of(prompt, chat_mode=chat, images=images, max_images=s.max_images)
        ids = p.ids
        self._check_fits(p, s)
        n_vocab = self.target.n_vocab
        for tok, _ in s.logit_bias:
            if tok >= n_vocab:
                raise LocalspecError(f"logit_bias: token {tok} is not in the vocabulary (0..{n_vocab - 1})")
        # an id only the target knows (its vocabulary may be padded beyond the draft's): never drafts
        draft_model = self.draft is None or max(ids) < self.draft.n_vocab
        lookup_text = self._checked_ids(lookup_text) if lookup_text else ()
        if lookup_text and self.draft is not None and max(lookup_text) >= self.draft.n_vocab:
            lookup_text = ()  # its drafts would reach the draft model: ids it does not have
        req = Request(
            ids, s, self._pair, self.tuners, frozenset(keep_special),
            draft_model=draft_model, sink=sink, images=p.runs,
            lookup_text=lookup_text, infill=self._infill_of(s),
        )  # fmt: skip
        self._inbox.put(req)
        if self._closed:  # closed meanwhile: the engine thread may be gone
            req.fail(LocalspecError("this engine is closed; create a new Engine"))
        return Handle(req, on_cancel=self._sched.cancelled)

    def _infill_of(self, s: Settings) -> Infill | None:
        """The target vocabulary's infill sampler (made on the first request that asks for it)."""
        if not s.infill:
            return None
        if self._infill is None:
            t = self.target
            end = t.fim_tokens()["eot"]
            self._infill = Infill(t.is_eog, t.token_bytes, end if end is not None else t.vocab.eos)
        return self._infill

    def _capped(self, s: Settings) -> Settings:
        """A request's fixed K no larger than the engine's own (auto's most, or its fixed K): a
        request asks, the person who started the engine decides (drafts change speed, not text)."""
        ceiling = max(AUTO_K_MAX, self.settings.draft_k or 0)
        return s.replace(draft_max=ceiling) if s.draft_k is not None and s.draft_k > ceiling else s

    def stream(
        self, prompt: str | Sequence[int] | list[dict], *, chat: bool = False, **overrides: Any
    ) -> Iterator[Chunk]:
        handle = self.submit(prompt, chat=chat, **overrides)
        try:
            yield from handle
        finally:  # an abandoned stream frees its slot; nothing is held that a next call waits on
            handle.cancel()

    def generate(self, prompt: str | Sequence[int] | list[dict], **overrides: Any) -> Response:
        for chunk in self.stream(prompt, **overrides):
            if chunk.response is not None:
                return chunk.response
        raise AssertionError("stream ended without a response")

    # -- embeddings ------------------------------------------------------------------------------
    def embed(
        self,
        inputs: Sequence[str | Sequence[int]],
        *,
        truncate: bool = False,
        stop: threading.Event | None = None,
    ) -> embed.Embeddings:
        """Unit-length embeddings of texts or token-id lists from the target's embeddings context
        (--embed-ctx tokens, llama/embed.py: made on the first call, or at load for an embedding model). Each pass of it runs on the
        engine thread between rounds. An input over --embed-ctx tokens is cut there when `truncate`,
        else refused (PromptTooLong). `stop` set (the client left): no further pass runs (Cancelled)."""
        self._check_open()
        n_ctx = self.settings.embed_ctx
        if n_ctx <= 0:
            raise LocalspecError("embeddings are off (--embed-ctx 0); give --embed-ctx N to serve them")
        ids = embed.token_lists(self.target, inputs, n_ctx, truncate)

        def run(part: range) -> np.ndarray:
            if stop is not None and stop.is_set():  # the client left while the pass waited its turn
                raise Cancelled("the embeddings were cancelled")
            try:
                return self._embedder_made().embed([ids[i] for i in part])
            except LocalspecError as e:  # the context or its decode failed: ours, not the input's
                raise GenerationFailed(str(e)) from None

        parts = []
        for part in embed.passes([len(x) for x in ids], n_ctx, llama.EMBED_SEQS):
            if stop is not None and stop.is_set():
                raise Cancelled("the embeddings were cancelled")
            parts.append(self.on_engine_thread(lambda part=part: run(part), yielding=True))
        return embed.Embeddings(embed.unit(np.concatenate(parts)), [len(x) for x in ids])

    def _embedder_made(self) -> Any:
        """The embeddings context (on the engine thread: it decodes a warm-up); its pair closes it."""
        if self._embedder is None:
            self._embedder = self._pair.stack.enter_context(
                embed_only.embedder_for(self.target, self.settings)
            )
        return self._embedder

    def _check_fits(self, p: media.Prompt, s: Settings) -> None:
        n_ctx, ids = self.target_ctx.n_ctx, p.ids
        if len(ids) + s.max_tokens > n_ctx:
            of_images = f", {p.n_image_ids} of them for {p.n_images} images" if p.n_images else ""
            raise PromptTooLong(
                f"prompt ({len(ids)} tokens{of_images}) + max_tokens ({s.max_tokens}) = {len(ids) + s.max_tokens} "
                f"exceeds the context of one slot, n_ctx={n_ctx}; shorten the prompt, lower "
                "--max-tokens or raise --n-ctx",
                n_prompt=len(ids),
                n_ctx=n_ctx,
            )


def _check_count(images: Sequence[Image], most: int | None) -> None:
    if most is not None and len(images) > most:
        raise LocalspecError(f"{len(images)} images in one request; at most {most} (--max-images)")
