"""The two calls out of the shell: the converter and the verification run, each imported on first use.

Importing them lazily keeps ``ddpify --help`` and ``--version`` from loading
libcst or torch.  Every caller goes through this module's attributes
(``backend.convert(...)``), so tests replace ``convert`` or ``verify`` here to
drive the shell with chosen results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from ddpify import Conversion, Options
    from ddpify.result import LocalModule
    from ddpify.verify import VerifyReport


def convert(source: bytes, *, path: str, options: Options, modules: Sequence[LocalModule] = ()) -> Conversion:
    """:func:`ddpify.convert`."""
    from ddpify import convert as convert_source

    return convert_source(source, path=path, options=options, modules=modules)


def verify(
    script: Path,
    *,
    nproc: int,
    script_args: Sequence[str],
    timeout: float,
    max_steps: int | None,
    workdir: Path,
    env: Mapping[str, str] | None = None,
) -> VerifyReport:
    """:func:`ddpify.verify.verify`."""
    from ddpify.verify import verify as verify_script

    return verify_script(
        script, nproc=nproc, script_args=script_args, timeout=timeout, max_steps=max_steps, workdir=workdir, env=env
    )
