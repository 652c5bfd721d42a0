"""Data: step-indexed batches (steps.py), hub access (hub.py), text corpora and their tokens
(corpora.py, tokenizer.py, tokens.py, text.py), images (images.py, vision.py) and the token and
image cache (cache.py); the groups' configs (config.py, torch-free, so that the config check
never waits on torch)."""
