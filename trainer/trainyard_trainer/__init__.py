"""trainyard's reference trainer: LoRA adapters trained the way OpenPipe ART trains them (RL and SFT)."""

__version__ = "0.1.0"
