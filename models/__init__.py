"""Embedding models: specs, file resolution, the ONNX encoder and the export CLI.

The contract the app uses::

    from models import ModelSpec, get_spec, load_encoder

``prepare_model`` builds (once, in the models cache) the verified int8 copy a
spec asks for; ``load_encoder`` calls it, and a bootstrap may call it first.
"""

from models.encoder import Encoder
from models.loader import load_encoder
from models.requantize import RequantizeError, prepare_model
from models.resolve import ChecksumMismatchError, ModelFileNotFoundError, get_spec
from models.spec import BUILTIN_SPECS, FileRef, ModelSpec, ModelSpecError

__all__ = [
    "BUILTIN_SPECS",
    "ChecksumMismatchError",
    "Encoder",
    "FileRef",
    "ModelFileNotFoundError",
    "ModelSpec",
    "ModelSpecError",
    "RequantizeError",
    "get_spec",
    "load_encoder",
    "prepare_model",
]
