"""Command-line options that are settings: declared once, from the settings table."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import typer

from specli import profiles

T = TypeVar("T")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]

SHORT_FLAGS = {"temperature": "-t", "max_tokens": "-n"}
# --exact is the `verify` setting as a flag
EXACT_OPTION = typer.Option(
    "--exact", help="Verify in chunks bit-identical to one-token decoding (slower; default: one batch, "
                    "equal to the target's output except at floating-point near-ties).")


def setting_option(name: str) -> Any:
    """`Annotated[type | None, typer.Option(...)]` for setting `name`: the flag, the type
    and the help come from the settings table; None means "not given"."""
    if name == "verify":
        return Annotated[bool | None, EXACT_OPTION]
    spec = profiles.SPECS[name]
    kind: Any = {"int": int, "float": float, "bool": bool, "strs": list[str]}.get(spec.kind, str)
    if spec.null_words:  # e.g. `--threads auto`: checked by the profiles layer
        kind = str
    text = spec.doc[0].upper() + spec.doc[1:] + (" (" + " | ".join(spec.choices) + ")" if spec.choices else "")
    flag = "--" + name.replace("_", "-")
    if kind is bool:  # --raw / --no-raw: a profile's true can be turned off too
        flag += "/--no-" + name.replace("_", "-")
    flags = [flag, *([SHORT_FLAGS[name]] if name in SHORT_FLAGS else [])]
    return Annotated[kind | None, typer.Option(*flags, help=text + ".")]


MODELS = ("target", "draft", "draft_pairing")
HARDWARE = ("n_gpu_layers", "draft_n_gpu_layers", "tensor_split", "threads", "verify", "rpc", "draft_rpc", "rpc_timeout")
# every option of a generation: the same in generate, chat and bench
GENERATION = (*MODELS, "drafter", "heads", "draft_max", "draft_p_min", "grammar_drafts", "temperature", "top_k", "top_p", "min_p", "seed",
              "max_tokens", "stop", "system", "raw", "history", "ctx", *HARDWARE)


def given_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings among `values` that were given (not None, not an empty list)."""
    out = {k: v for k, v in values.items() if v is not None and v != []}
    if "verify" in out:  # the --exact flag
        out["verify"] = "exact" if out["verify"] else "batch"
    return out


def with_settings(*names: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Give a command one option per setting in `names`; it receives those given as one
    keyword argument, `overrides` (setting name -> value, for `profiles.resolve_settings`)."""

    def decorate(command: Callable[..., T]) -> Callable[..., T]:
        sig = inspect.signature(command, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "overrides"]
        added = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=setting_option(n))
                 for n in names]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> T:
            overrides = given_settings({n: kwargs.pop(n) for n in names})
            return command(*args, overrides=overrides, **kwargs)

        run.__signature__ = sig.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        return run

    return decorate


ProfileOpt = Annotated[str | None, typer.Option("--profile", "-p", help="Profile name or YAML path.")]
RecalibrateOpt = Annotated[bool, typer.Option(
    "--recalibrate", help="Measure this machine's costs again instead of using the cached calibration.")]

