"""Where a job's tokenizer, model and optimizer state come from, and what happens once its adapter is saved.

`ColdSource` loads everything from disk for one job, as a process per job does. `resident.ResidentSource` keeps the
base model loaded between the jobs of one long-lived process. rl.run and sft.run take either."""
from __future__ import annotations

from typing import Any

import torch

from .model import Options, load_model, load_optimizer_state, load_tokenizer, load_vocab_size


class ColdSource:
    def tokenizer(self, base_model: str) -> Any:
        return load_tokenizer(base_model)

    def vocab_size(self, base_model: str) -> int:
        """The rows of the model's token embedding: the token ids the inputs may hold."""
        return load_vocab_size(base_model)

    def model(self, base_model: str, adapter_dir: str | None, options: Options, device: torch.device) -> Any:
        model = load_model(base_model, adapter_dir, options, device)
        # Training starts from the same RNG state however the model was obtained (warm or cold).
        torch.manual_seed(options.seed)
        return model

    def optimizer_state(self, adapter_dir: str | None, kind: str) -> dict[str, Any] | None:
        return load_optimizer_state(adapter_dir, kind)

    def saved(self, model: Any, output_dir: str, optimizer_state: dict[str, Any] | None) -> None:
        """Called once the adapter (and its optimizer state, when any) are written to `output_dir`."""
