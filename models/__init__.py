"""Embedding models: specs, file resolution, the ONNX encoder and the export CLI.

The contract the app uses::

    from models import ModelSpec, get_spec, load_encoder
"""

from models.encoder import Encoder, load_encoder
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
    "get_spec",
    "load_encoder",
]
