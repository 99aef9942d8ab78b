"""Entry point of the `benchmaker` console script: imports every recipe module (each
registers its commands on `recipes.app.app`) and runs the app.

Exit codes: 0 ok; 1 the run finished but is invalid or crossed a threshold; 2 bad
input (config, rate spec, arguments), reported in one line without a traceback.
"""

from __future__ import annotations

import sys

from recipes.app import app

# Recipe modules: one import each; importing registers the commands.
from recipes import bench  # noqa: F401,E402
from recipes import retry  # noqa: F401,E402
from recipes import serve_replay  # noqa: F401,E402
from recipes import convert  # noqa: F401,E402
from recipes import episode  # noqa: F401,E402
from recipes import warehouse_cli  # noqa: F401,E402
from recipes import report  # noqa: F401,E402
from recipes import swebench_replay  # noqa: F401,E402
from recipes import sandbox  # noqa: F401,E402
from recipes import swebench  # noqa: F401,E402
from recipes import trajectory_replay  # noqa: F401,E402
from recipes import calibrate  # noqa: F401,E402
from recipes import record  # noqa: F401,E402
from recipes import sglang  # noqa: F401,E402
from recipes import prefect_server  # noqa: F401,E402


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with `argv` (default sys.argv[1:]); returns the exit code."""
    from cyclopts import CycloptsError
    from pydantic import ValidationError

    from benchmaker.errors import BenchmakerError

    try:
        result = app(argv if argv is not None else sys.argv[1:], result_action="return_value",
                     print_error=False, exit_on_error=False)
    except BenchmakerError as exc:
        print(f"benchmaker: error: {exc}", file=sys.stderr)
        return 2
    except CycloptsError as exc:  # a flag cyclopts could not parse: one line too, no panel
        print(f"benchmaker: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # a model a recipe built without naming the flag: still no dump
        from benchmaker.config_file import format_validation_error

        print(f"benchmaker: error: {format_validation_error(exc, None)}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
