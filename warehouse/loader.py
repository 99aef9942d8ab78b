"""Load one run bundle into the warehouse: the only code that writes the warehouse file.

A load is idempotent per run_id. It opens the file for writing (waiting while another
process holds the lock, benchmaker.warehouse.connection), applies pending migrations
(benchmaker.warehouse.schema), re-creates the views (benchmaker.warehouse.views), then in ONE transaction:

    BEGIN;
    DELETE FROM <every run table> WHERE run_id = $run_id;
    INSERT INTO requests SELECT ... FROM read_json([files], format='newline_delimited',
                                                   columns={...}, filename=true);
    ... episodes, turns, grades, sweep_points, monitor_samples, server_stats, lanes, runs
    COMMIT;

so a second load of the same bundle replaces the run's rows (identical counts), and a
failed load leaves the warehouse as it was (no half-written run). Rows are never inserted
with executemany (~400x slower); the JSON is read by DuckDB itself with an
explicit `columns=` struct, so a column that is null in every line keeps its type.

Bundle layout read (docs/architecture.md), each file optional except manifest.json, and each
looked up both in the run directory and in every `points/<sweep_point>/` below it:

    manifest.json                      -> runs (one row)
    summary.json                       -> runs.summary; runs.partial/partial_reason: true
                                          when it says "partial": true or is absent from a
                                          bundle without sweep_points.jsonl either (a
                                          killed run; loaded, flagged, never silently whole)
    samples.jsonl, samples-w<k>.jsonl  -> requests (shard = k, 0 without -w<k>; episode_id
                                          and turn_index from meta for an agent's calls)
    episodes*.jsonl                    -> episodes (shard from the line; 0 without)
    turns*.jsonl                       -> turns (shard from the line; 0 without): what only a
                                          turn has, its call being a request; a
                                          line of the older shape (sent_ns, outcome, usage,
                                          model...) whose call has no request row also
                                          becomes one (lane 'agent', meta.source 'turns')
    grades*.jsonl                      -> grades
    sweep_points*.jsonl                -> sweep_points (from_file = true); points seen in
                                          requests/episodes but not listed are added with
                                          from_file = false
    server_stats*.json                 -> server_stats (one row per file)
    monitor*.jsonl                     -> monitor_samples
    (lanes: one row per lane seen in requests or declared in manifest config.lanes)

A row under `points/<name>/` whose sweep_point is null gets `<name>`. Lines of
samples/episodes/turns/grades must carry the manifest's run_id; sweep_points and
monitor rows take it from the manifest.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson

from benchmaker.engine.records import SAMPLE_COLUMNS
from benchmaker.warehouse import views as _views
from benchmaker.warehouse.connection import DEFAULT_WAIT_S, connect_writer
from benchmaker.warehouse.errors import BundleError
from benchmaker.warehouse.schema import migrate

# Tables holding rows of a run, in the order they are deleted and filled.
RUN_TABLES = (
    "requests",
    "token_events",
    "episodes",
    "turns",
    "grades",
    "sweep_points",
    "lanes",
    "server_stats",
    "monitor_samples",
    "runs",
)

# DuckDB read_json's default maximum_object_size is 16 MB; a sample with a long error
# body and thousands of token events stays far below 256 MB.
_MAX_OBJECT_BYTES = 256 * 1024 * 1024

_POINT_FROM_FILE = r"nullif(regexp_extract(filename, '/points/([^/]+)/[^/]+$', 1), '')"


@dataclass(frozen=True, slots=True)
class _JsonlTable:
    """A table filled from JSONL files: `pattern` is the file glob, `derived` maps a table
    column to the SQL expression that fills it instead of a JSON key, `defaults` a column
    read from the file to the SQL expression used where it is null, `run_id_in_file` says
    whether each line must carry the manifest's run_id."""

    table: str
    pattern: str
    derived: dict[str, str]
    defaults: dict[str, str]
    run_id_in_file: bool


_POINT_DEFAULT = {"sweep_point": _POINT_FROM_FILE}
# episodes/turns lines carry `shard` only in a distributed run (benchmaker.sweep.shard)
_SHARD_DEFAULT = {**_POINT_DEFAULT, "shard": "0"}

_JSONL_TABLES = (
    _JsonlTable(
        "requests",
        "samples*.jsonl",
        {
            "shard": "coalesce(TRY_CAST(nullif(regexp_extract(filename, "
            r"'samples-w(\d+)\.jsonl$', 1), '') AS INTEGER), 0)",
            # a model call of an agent episode names its episode and turn in meta (0007)
            "episode_id": "meta ->> 'episode_id'",
            "turn_index": "TRY_CAST(meta ->> 'turn_index' AS INTEGER)",
        },
        _POINT_DEFAULT,
        True,
    ),
    _JsonlTable("episodes", "episodes*.jsonl", {}, _SHARD_DEFAULT, True),
    _JsonlTable("turns", "turns*.jsonl", {}, _SHARD_DEFAULT, True),
    _JsonlTable("grades", "grades*.jsonl", {}, _POINT_DEFAULT, True),
    _JsonlTable(
        "sweep_points", "sweep_points*.jsonl", {"run_id": "$run_id", "from_file": "true"}, _POINT_DEFAULT, False
    ),
    _JsonlTable("monitor_samples", "monitor*.jsonl", {"run_id": "$run_id"}, _POINT_DEFAULT, False),
)


@dataclass(slots=True)
class LoadReport:
    """What one load did.

    `partial_reason` is None for a complete run, else why it is flagged partial
    (runs.partial). `rows` maps each run table to the rows now held for the run; `files` maps each table
    to the bundle files read into it; `replaced` is true when the run was already in the
    warehouse (its old rows were deleted); `seconds` is the wall time of the whole call
    (lock wait included), `lock_wait_s` the part spent waiting for the file lock.
    """

    run_id: str
    warehouse: Path
    run_dir: Path
    rows: dict[str, int] = field(default_factory=dict)
    files: dict[str, list[Path]] = field(default_factory=dict)
    replaced: bool = False
    partial_reason: str | None = None
    seconds: float = 0.0
    lock_wait_s: float = 0.0


def load_run(
    warehouse: Path,
    run_dir: Path,
    *,
    token_events: bool = False,
    wait_s: float = DEFAULT_WAIT_S,
) -> LoadReport:
    """Load the run bundle in `run_dir` into the DuckDB file `warehouse` (created when
    absent), replacing any earlier load of the same run_id, in one transaction.

    `token_events=True` also fills `token_events` (one row per token-bearing event,
    unnested from requests.token_event_ns/token_event_tokens). `wait_s` bounds the wait
    for another process's write lock (seconds).

    Raises BundleError (nothing of the run written) when manifest.json is missing or
    invalid, a JSONL line is malformed or has a value of the wrong type (message:
    `path:line: field: problem (got VALUE)`), or a line carries another run_id;
    WarehouseLocked when the lock is not free within `wait_s`; MigrationError/ViewError
    naming the SQL file that failed.
    """
    started = time.monotonic()
    run_dir = Path(run_dir).resolve()
    warehouse = Path(warehouse)
    manifest = _read_manifest(run_dir)
    run_id = manifest["run_id"]
    report = LoadReport(run_id=run_id, warehouse=warehouse, run_dir=run_dir)
    files = {spec.table: _find(run_dir, spec.pattern) for spec in _JSONL_TABLES}
    files["server_stats"] = _find(run_dir, "server_stats*.json")
    report.files = {k: v for k, v in files.items() if v}
    summary_path = run_dir / "summary.json"
    summary_text = _read_json_text(summary_path) if summary_path.is_file() else None
    report.partial_reason = _partial(summary_text, bool(files.get("sweep_points")))[1]

    t_lock = time.monotonic()
    con = connect_writer(warehouse, wait_s=wait_s)
    report.lock_wait_s = time.monotonic() - t_lock
    try:
        migrate(con)
        _views.install_views(con)
        con.execute("BEGIN TRANSACTION")
        try:
            report.replaced = _delete_run(con, run_id)
            for spec in _JSONL_TABLES:
                if files[spec.table]:
                    _insert_jsonl(con, spec, files[spec.table], run_id)
            _insert_requests_of_old_turns(con, files["turns"], run_id)
            _insert_derived_sweep_points(con, run_id)
            _insert_server_stats(con, files["server_stats"], run_id)
            _insert_lanes(con, run_id, manifest)
            if token_events:
                _insert_token_events(con, run_id)
            _insert_run(con, manifest, summary_text, run_dir, report.partial_reason)
            report.rows = _count_rows(con, run_id)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        con.close()
    report.seconds = time.monotonic() - started
    return report


def _find(run_dir: Path, pattern: str) -> list[Path]:
    """Files matching `pattern` in run_dir and in run_dir/points/*/, sorted."""
    return sorted(run_dir.glob(pattern)) + sorted(run_dir.glob(f"points/*/{pattern}"))


def _read_json_text(path: Path) -> str:
    """The text of a JSON document, checked to parse. Raises BundleError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
        orjson.loads(text)
    except (OSError, UnicodeDecodeError, orjson.JSONDecodeError) as exc:
        raise BundleError(f"{path}: not a JSON document: {exc}") from exc
    return text


_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "label": (str, type(None)),
    "created_at": (str, type(None)),
    "t0_wall_ns": (int, type(None)),
    "config": (dict, type(None)),
    "seed": (int, type(None)),
    "versions": (dict, type(None)),
    "git_sha": (str, type(None)),
    "host": (dict, type(None)),
    "workers": (int, type(None)),
    "slo": (dict, type(None)),
}


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    """manifest.json of the bundle, checked field by field."""
    path = run_dir / "manifest.json"
    if not path.is_file():
        raise BundleError(f"{path}: missing (a run bundle needs manifest.json)")
    manifest = orjson.loads(_read_json_text(path))
    if not isinstance(manifest, dict):
        raise BundleError(f"{path}: expected a JSON object (got {type(manifest).__name__})")
    run_id = manifest.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise BundleError(f"{path}: run_id: expected a non-empty string (got {run_id!r})")
    for key, types in _MANIFEST_TYPES.items():
        value = manifest.get(key)
        if not isinstance(value, types) or (isinstance(value, bool) and int in types):
            raise BundleError(f"{path}: {key}: expected {'/'.join(t.__name__ for t in types)} (got {_show(value)})")
    if manifest.get("created_at") is not None:
        try:
            datetime.fromisoformat(manifest["created_at"])
        except ValueError as exc:
            raise BundleError(
                f"{path}: created_at: expected an ISO-8601 time (got {_show(manifest['created_at'])})"
            ) from exc
    return manifest


def _first_value(cur: duckdb.DuckDBPyConnection) -> Any:
    """The first column of the one row a count or INSERT statement returns."""
    row = cur.fetchone()
    if row is None:
        raise duckdb.Error("the statement returned no row")
    return row[0]


def _delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    existed = _first_value(con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id])) > 0
    for table in RUN_TABLES:
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
    return existed


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    """Column name -> DuckDB type name of a main-schema table, in table order."""
    rows = con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = 'main' AND table_name = ? ORDER BY column_index",
        [table],
    ).fetchall()
    return {name: dtype for name, dtype in rows}


def _insert_jsonl(con: duckdb.DuckDBPyConnection, spec: _JsonlTable, files: list[Path], run_id: str) -> None:
    """INSERT INTO spec.table SELECT ... FROM read_json(files) in one statement; on a
    DuckDB error, point at the first bad line (BundleError)."""
    table_cols = table_columns(con, spec.table)
    if spec.table == "requests":
        read_cols = dict(SAMPLE_COLUMNS)
    else:
        read_cols = {c: t for c, t in table_cols.items() if c not in spec.derived}

    def column(c: str) -> str:
        if c in spec.derived:
            return f"{spec.derived[c]} AS {c}"
        return f"coalesce({c}, {spec.defaults[c]}) AS {c}" if c in spec.defaults else c

    select = ", ".join(column(c) for c in table_cols)
    sql = (
        f"INSERT INTO {spec.table} ({', '.join(table_cols)}) SELECT {select} FROM read_json("
        "$files, format='newline_delimited', columns=$columns, filename=true, "
        f"maximum_object_size={_MAX_OBJECT_BYTES})"
    )
    params: dict[str, Any] = {"files": [str(f) for f in files], "columns": read_cols}
    if "$run_id" in select:
        params["run_id"] = run_id
    try:
        inserted = _first_value(con.execute(sql, params))
    except duckdb.Error as exc:
        where = _locate_bad_line(files, read_cols, None)
        raise BundleError(where or f"{', '.join(map(str, files))}: {exc}") from exc
    if spec.run_id_in_file:
        ours = _first_value(con.execute(f"SELECT count(*) FROM {spec.table} WHERE run_id = ?", [run_id]))
        if ours != inserted:
            where = _locate_bad_line(files, read_cols, run_id)
            raise BundleError(where or f"{', '.join(map(str, files))}: run_id: lines of another run")


# The request figures a turns.jsonl line carried before turns kept only what a turn has
# (migration 0010 moved the warehouse's rows of that shape the same way).
_OLD_TURN_COLUMNS = {
    "run_id": "VARCHAR",
    "sweep_point": "VARCHAR",
    "episode_id": "VARCHAR",
    "turn_index": "INTEGER",
    "shard": "INTEGER",
    "sent_ns": "BIGINT",
    "first_token_ns": "BIGINT",
    "end_ns": "BIGINT",
    "outcome": "VARCHAR",
    "http_status": "INTEGER",
    "miss_kind": "VARCHAR",
    "prompt_tokens": "BIGINT",
    "output_tokens": "BIGINT",
    "cached_tokens": "BIGINT",
    "model": "VARCHAR",
}


def _insert_requests_of_old_turns(con: duckdb.DuckDBPyConnection, files: list[Path], run_id: str) -> None:
    """A request row for each turns.jsonl line of the older shape (it has `sent_ns`)
    whose model call has no request of its (sweep_point, episode_id, turn_index): bundles
    that wrote no samples.jsonl (`benchmaker episode --out`, live runs written before turns moved to samples)
    keep their call's figures, now read from `requests` as every other call's. Only files
    whose first line has the older shape are read again."""
    files = [f for f in files if _first_line_has(f, b'"sent_ns"')]
    if not files:
        return
    con.execute(
        f"""
        INSERT INTO requests (run_id, lane, sweep_point, worker, phase, outcome, http_status, intended_ns,
                              sent_ns, first_token_ns, end_ns, usage_present, prompt_tokens, output_tokens,
                              cached_tokens, model, meta, shard, episode_id, turn_index)
        WITH t AS (
            SELECT * REPLACE (coalesce(sweep_point, {_POINT_FROM_FILE}) AS sweep_point)
            FROM read_json($files, format='newline_delimited', columns=$columns, filename=true,
                           maximum_object_size={_MAX_OBJECT_BYTES})
            WHERE sent_ns IS NOT NULL AND run_id = $run_id
        )
        SELECT t.run_id, 'agent', t.sweep_point, 0, 'measure', t.outcome, t.http_status, t.sent_ns, t.sent_ns,
               t.first_token_ns, t.end_ns, t.prompt_tokens IS NOT NULL AND t.output_tokens IS NOT NULL,
               t.prompt_tokens, t.output_tokens, t.cached_tokens, t.model,
               json_object('episode_id', t.episode_id, 'turn_index', t.turn_index, 'miss_kind', t.miss_kind,
                           'source', 'turns'),
               coalesce(t.shard, 0), t.episode_id, t.turn_index
        FROM t
        WHERE NOT EXISTS (
            SELECT 1 FROM requests AS r
            WHERE r.run_id = t.run_id AND r.sweep_point IS NOT DISTINCT FROM t.sweep_point
              AND r.episode_id = t.episode_id AND r.turn_index = t.turn_index)
        """,
        {"files": [str(f) for f in files], "columns": _OLD_TURN_COLUMNS, "run_id": run_id},
    )


def _first_line_has(path: Path, needle: bytes) -> bool:
    """Whether the first non-blank line of `path` contains `needle`."""
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.strip():
                return needle in raw
    return False


def _insert_derived_sweep_points(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Sweep points seen in requests or episodes but not listed in sweep_points.jsonl."""
    con.execute(
        """
        INSERT INTO sweep_points (run_id, sweep_point, concurrency, from_file)
        WITH seen AS (
            SELECT DISTINCT sweep_point, NULL::INTEGER AS concurrency
            FROM requests WHERE run_id = $run_id AND sweep_point IS NOT NULL
            UNION ALL
            SELECT sweep_point, concurrency
            FROM episodes WHERE run_id = $run_id AND sweep_point IS NOT NULL
        )
        SELECT $run_id, sweep_point, max(concurrency), false
        FROM seen
        WHERE sweep_point NOT IN (
            SELECT sweep_point FROM sweep_points WHERE run_id = $run_id)
        GROUP BY sweep_point
        """,
        {"run_id": run_id},
    )


def _insert_server_stats(con: duckdb.DuckDBPyConnection, files: list[Path], run_id: str) -> None:
    if not files:
        return
    for path in files:
        _read_json_text(path)  # names the file when it does not parse
    con.execute(
        f"""
        INSERT INTO server_stats (run_id, sweep_point, stats)
        SELECT $run_id, {_POINT_FROM_FILE}, json
        FROM read_json_objects($files, format='unstructured', filename=true,
                               maximum_object_size={_MAX_OBJECT_BYTES})
        """,
        {"run_id": run_id, "files": [str(f) for f in files]},
    )


def _lane_specs(manifest: dict[str, Any]) -> dict[str, Any]:
    """Lane name -> its spec from manifest config.lanes, which may be a mapping by name or
    a list of objects carrying "name" (or "lane"); anything else declares no lane."""
    lanes = (manifest.get("config") or {}).get("lanes")
    if isinstance(lanes, dict):
        return {str(k): v for k, v in lanes.items()}
    specs: dict[str, Any] = {}
    if isinstance(lanes, list):
        for item in lanes:
            if isinstance(item, dict):
                name = item.get("name", item.get("lane"))
                if isinstance(name, str):
                    specs[name] = item
    return specs


def _insert_lanes(con: duckdb.DuckDBPyConnection, run_id: str, manifest: dict[str, Any]) -> None:
    specs = _lane_specs(manifest)
    con.execute(
        """
        INSERT INTO lanes (run_id, lane, n_requests, spec)
        WITH declared AS (
            SELECT unnest($names::VARCHAR[]) AS lane, unnest($specs::VARCHAR[])::JSON AS spec
        ),
        seen AS (
            SELECT lane, count(*) AS n_requests FROM requests
            WHERE run_id = $run_id GROUP BY lane
        )
        SELECT $run_id, lane, coalesce(seen.n_requests, 0), declared.spec
        FROM seen FULL OUTER JOIN declared USING (lane)
        """,
        {
            "run_id": run_id,
            "names": list(specs),
            "specs": [json.dumps(v) for v in specs.values()],
        },
    )


def _insert_token_events(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    con.execute(
        """
        INSERT INTO token_events (run_id, worker, seq, event_index, t_ns, tokens)
        WITH events AS (
            SELECT run_id, worker, seq, token_event_ns, token_event_tokens,
                   generate_subscripts(token_event_ns, 1) AS i
            FROM requests WHERE run_id = $run_id AND token_event_ns IS NOT NULL
        )
        SELECT run_id, worker, seq, i - 1, token_event_ns[i], token_event_tokens[i]
        FROM events
        """,
        {"run_id": run_id},
    )


def _insert_run(
    con: duckdb.DuckDBPyConnection,
    manifest: dict[str, Any],
    summary_text: str | None,
    run_dir: Path,
    partial_reason: str | None = None,
) -> None:
    created_at = manifest.get("created_at")
    created = None
    if created_at is not None:
        created = datetime.fromisoformat(created_at)
        if created.tzinfo is not None:
            created = created.astimezone(UTC).replace(tzinfo=None)

    def js(key: str) -> str | None:
        value = manifest.get(key)
        return None if value is None else json.dumps(value)

    con.execute(
        """
        INSERT INTO runs (run_id, kind, label, created_at, t0_wall_ns, config, seed, versions,
                          git_sha, host, workers, slo, summary, source_dir, loaded_at, partial, partial_reason)
        VALUES (?, ?, ?, ?, ?, ?::JSON, ?, ?::JSON, ?, ?::JSON, ?, ?::JSON, ?::JSON, ?,
                now() AT TIME ZONE 'UTC', ?, ?)
        """,
        [
            manifest["run_id"],
            manifest.get("kind"),
            manifest.get("label"),
            created,
            manifest.get("t0_wall_ns"),
            js("config"),
            manifest.get("seed"),
            js("versions"),
            manifest.get("git_sha"),
            js("host"),
            manifest.get("workers"),
            js("slo"),
            summary_text,
            str(run_dir),
            partial_reason is not None,
            partial_reason,
        ],
    )


def _partial(summary_text: str | None, has_sweep_points: bool = False) -> tuple[bool, str | None]:
    """(runs.partial, runs.partial_reason) of a bundle's summary.json text (None: absent).
    A sweep bundle (swebench-replay, llm-sweep) has no run-level summary.json: its
    sweep_points.jsonl, written after the last point, marks it complete."""
    if summary_text is None:
        if has_sweep_points:
            return False, None
        return True, "no summary.json in the bundle (the run was killed before it finished)"
    summary = json.loads(summary_text)
    if isinstance(summary, dict) and summary.get("partial"):
        signal_name = summary.get("interrupted_by")
        return True, f"interrupted{' by ' + signal_name if signal_name else ''} (summary.json partial: true)"
    return False, None


def _count_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, int]:
    union = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t} WHERE run_id = $run_id" for t in RUN_TABLES)
    return {t: int(n) for t, n in con.execute(union, {"run_id": run_id}).fetchall()}


# --- pointing at the bad line ------------------------------------------------------------

_INT_RANGES = {
    "TINYINT": 2**7,
    "SMALLINT": 2**15,
    "INTEGER": 2**31,
    "BIGINT": 2**63,
}


def _show(value: Any) -> str:
    """A value as JSON text, cut to 80 characters, for error messages."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_problem(value: Any, dtype: str) -> str | None:
    """Why `value` (parsed JSON) does not fit DuckDB type `dtype`, or None if it fits."""
    if value is None or dtype == "JSON":
        return None
    if dtype.endswith("[]"):
        if not isinstance(value, list):
            return f"expected a list of {dtype[:-2]}"
        for i, item in enumerate(value):
            problem = _type_problem(item, dtype[:-2])
            if problem:
                return f"[{i}]: {problem}"
        return None
    if dtype in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an integer ({dtype})"
        if not -_INT_RANGES[dtype] <= value < _INT_RANGES[dtype]:
            return f"out of range for {dtype}"
        return None
    if dtype in ("DOUBLE", "FLOAT"):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "expected a number"
    if dtype == "BOOLEAN":
        return None if isinstance(value, bool) else "expected true/false"
    if dtype == "VARCHAR":
        return None if isinstance(value, str) else "expected a string"
    return None


def _locate_bad_line(files: list[Path], columns: dict[str, str], run_id: str | None) -> str | None:
    """`path:line: field: problem (got VALUE)` for the first line of `files` that is not a
    JSON object, has a value of the wrong type for `columns`, or (when run_id is given)
    carries another run_id; None when every line looks right."""
    for path in files:
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    return f"{path}:{lineno}: malformed JSON: {exc}"
                if not isinstance(obj, dict):
                    return f"{path}:{lineno}: expected a JSON object (got {_show(obj)})"
                if run_id is not None and obj.get("run_id") != run_id:
                    return (
                        f"{path}:{lineno}: run_id: expected the manifest's {run_id!r} (got {_show(obj.get('run_id'))})"
                    )
                for name, dtype in columns.items():
                    problem = _type_problem(obj.get(name), dtype)
                    if problem:
                        return f"{path}:{lineno}: {name}: {problem} (got {_show(obj.get(name))})"
    return None
