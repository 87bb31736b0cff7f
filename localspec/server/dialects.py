"""Every dialect the server speaks, mounted in this order: one line each. A dialect is a module with
`router` (its routes), `error_response(APIError) -> Response` (its error shape, chosen for every
error on its paths) and, optionally, `PREFIX` (paths no route matches that still take its shape).
docs/architecture.md ("Adding a dialect") says how to write one."""

from localspec.server import infill, llama_server, model_list, ops
from localspec.server.anthropic import messages
from localspec.server.ollama import chat as ollama_chat
from localspec.server.ollama import embed as ollama_embed
from localspec.server.ollama import models as ollama_models
from localspec.server.openai import chat, completions, embeddings, responses

DIALECTS = (
    ops,  # /health, /metrics, /openapi.json
    model_list,  # OpenAI's and Anthropic's GET /v1/models (by the anthropic-version header)
    chat,  # OpenAI: POST /v1/chat/completions
    completions,  # OpenAI: POST /v1/completions
    responses,  # OpenAI: POST /v1/responses
    llama_server,  # POST /tokenize, /detokenize
    infill,  # llama-server's POST /infill (fill-in-the-middle: llama.vim, llama.vscode)
    embeddings,  # OpenAI: POST /v1/embeddings
    ollama_chat,  # Ollama: POST /api/chat, /api/generate
    ollama_embed,  # Ollama: POST /api/embed, /api/embeddings
    ollama_models,  # Ollama: /api/tags, /api/show, /api/ps, /api/version; pull & co. refused
    messages,  # Anthropic: POST /v1/messages, /v1/messages/count_tokens
)
