"""tinygpt: train, sample and inspect tiny GPTs (tokenizer, model, presets, devices, training, sampling).

Depends on torch, regex and the standard library only (the command line adds tqdm
for its progress bar); it never imports the dashboard's ``app`` or ``worker``.
"""

__version__ = "0.1.0"
