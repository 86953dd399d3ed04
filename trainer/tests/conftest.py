import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

from tiny import build_model_dir, build_tokenizer  # noqa: E402

# Tiny models on a shared CPU: one thread avoids OpenMP spin-waiting against other processes (10x faster here).
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return build_model_dir(str(tmp_path_factory.mktemp("tiny-model")))
