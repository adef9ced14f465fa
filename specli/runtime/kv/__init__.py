"""Conversations' KV state kept past the live one: below the loaded pair, which serve and
chat hand it.

- prompt_cache: several conversations' sequence states in RAM, saved and restored around llama.cpp sequences
- cache_files: the prompt cache's files on disk, one state per file, checked before loading
"""
