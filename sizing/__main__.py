"""``python -m sizing ENV...``: load each environment and print its placement table (every
node pool with its pods and the CPU, memory and GPUs they take of what the nodes offer), its
sizing row (checkpoint, FSx, goodput) and the checkpoint-interval warning where there is one.
`make synth` runs it; a config error prints the errors and exits 1."""

from __future__ import annotations

import sys

from config import ConfigError
from sizing import placement, storage
from sizing.check import load_checked
from sizing.plan import checkpoint_interval_warning, plan_of


def main(argv: list[str] | None = None) -> int:
    names = argv if argv is not None else sys.argv[1:]
    if not names:
        print("usage: python -m sizing ENV [ENV...]", file=sys.stderr)
        return 2
    for name in names:
        try:
            env = load_checked(name)
        except ConfigError as err:
            print(err.render(), file=sys.stderr)
            return 1
        print(placement.render_table(env))
        row = storage.table_row(env.name, plan_of(env).checkpoint)
        print(
            f"Sizing of {env.name} (docs/reference/sizing.md): "
            + "; ".join(f"{h} {v}" for h, v in zip(storage.TABLE_HEADERS[1:], row[1:], strict=True))
        )
        warning = checkpoint_interval_warning(env)
        if warning:
            print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
