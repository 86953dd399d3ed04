"""A stand-in for the `wandb` package, which the client suites do not install.

openpipe-art 0.5.17 runs `import wandb` in `Model._get_wandb_run` (called by `backend.train`) before it
checks `WANDB_API_KEY`, so the import must succeed even with W&B switched off. Without that key ART
never uses the module; anything that does touch it fails loudly here instead of reaching W&B.
"""


def __getattr__(name: str):
    raise RuntimeError(f"wandb.{name} used in the client tests: W&B is switched off (WANDB_API_KEY must stay unset)")
