"""OpenAI's model card (GET /v1/models, server/model_list.py, and llama-server's GET /models, the
same list): every model the server serves, loaded or not, with vLLM's `max_model_len`, llama-server's
`meta` and its router's `status` (loaded, loading, unloaded, error), and the files and memory behind
the name."""

from __future__ import annotations

from localspec.server.openai import schemas as s
from localspec.serving.registry import Status


def card(st: Status) -> s.ModelCard:
    c = st.card
    return s.ModelCard(
        id=st.name, created=c.created, max_model_len=c.n_ctx, context_length=c.n_ctx,
        max_context_length=c.n_ctx, loaded_context_length=c.n_ctx, capabilities=c.capabilities,
        architecture=s.Architecture(input_modalities=["text", "image"] if c.vision else ["text"]),
        meta=s.ModelMeta(n_ctx=c.n_ctx, n_ctx_train=c.n_ctx_train, n_vocab=c.n_vocab, n_params=c.n_params, size=c.size),
        status=s.ModelStatus(
            value=st.state, failed=True if st.state == "error" else None, error=st.error, load_s=st.load_s,
            loaded_at=_int(st.loaded_at), expires_at=_int(st.expires_at), pid=st.pid,
        ),
        localspec=s.ServedFiles(
            kind=st.kind, path=st.path, target=c.target, draft=c.draft, parallel=c.parallel, memory=st.memory
        ),
    )  # fmt: skip


def _int(t: float | None) -> int | None:
    return None if t is None else int(t)
