"""Statements written once, for the few the hottest paths run on every agent action.

The ORM compiles each query anew, 1-3 ms of CPU apiece; on the claim path that was most
of a claim's CPU (docs/benchmarks.md). The statements here are built from the models' own
metadata (table and column names) and every value is prepared by its field
(``get_db_prep_save``: the same conversion the ORM applies), so they behave the same on
SQLite and PostgreSQL. Keep this module small: only statements with a measured cost.
"""

from __future__ import annotations

import json

from django.db import connection


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _fields(model, names):
    return [model._meta.get_field(name) for name in names]


def insert_statement(model, rows: list[dict]) -> tuple[str, list]:
    """The text and parameters of ``insert(model, rows)``, to embed in a larger statement."""
    return _insert(model, rows)


def _insert(model, rows: list[dict]) -> tuple[str, list]:
    names = list(rows[0])
    fields = _fields(model, names)
    marks = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (
        f"INSERT INTO {_q(model._meta.db_table)} ({', '.join(_q(f.column) for f in fields)}) "
        f"VALUES {', '.join([marks] * len(rows))}"
    )
    params = [field.get_db_prep_save(row[name], connection) for row in rows for field, name in zip(fields, names, strict=True)]
    return sql, params


def _update(model, pks: list, values: dict) -> tuple[str, list]:
    fields = _fields(model, list(values))
    pk_field = model._meta.pk
    sql = (
        f"UPDATE {_q(model._meta.db_table)} SET {', '.join(f'{_q(f.column)} = %s' for f in fields)} "
        f"WHERE {_q(pk_field.column)} IN ({', '.join(['%s'] * len(pks))})"
    )
    params = [field.get_db_prep_save(values[field.attname], connection) for field in fields]
    return sql, [*params, *(pk_field.get_db_prep_value(pk, connection) for pk in pks)]


def insert(model, rows: list[dict], *, returning_pk: bool = False):
    """INSERT ``rows`` (dicts of attname -> value, the same keys in each) in one statement;
    with ``returning_pk``, return the new primary key of the (single) row."""
    if not rows:
        return None
    sql, params = _insert(model, rows)
    if returning_pk:
        sql += f" RETURNING {_q(model._meta.pk.column)}"  # PostgreSQL, and SQLite since 3.35
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0] if returning_pk else None


def update(model, pk, values: dict) -> int:
    """UPDATE one row by primary key; returns the number of rows changed."""
    return update_many(model, [pk], values)


def update_many(model, pks, values: dict) -> int:
    """UPDATE the rows with these primary keys to the same ``values``."""
    pks = list(pks)
    if not pks:
        return 0
    sql, params = _update(model, pks, values)
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.rowcount


def update_statement(model, pk, values: dict) -> tuple[str, list]:
    """The text and parameters of ``update(model, pk, values)``, for ``run``."""
    return _update(model, [pk], values)


def write(inserts: list[tuple], update: tuple | None = None, *, read: tuple[str, list] | None = None):
    """Several writes in one round trip: ``inserts`` is a list of ``(model, rows)`` (as
    for ``insert``; empty lists are skipped), ``update`` one ``(model, pk, values)``;
    with ``read``, see ``run``."""
    parts = [_insert(model, rows) for model, rows in inserts if rows]
    if update is not None and update[2]:
        model, pk, values = update
        parts.append(_update(model, [pk], values))
    return run(parts, read=read)


def run(parts: list[tuple[str, list]], *, read: tuple[str, list] | None = None):
    """Run ``(statement, params)`` writes (INSERT, UPDATE, DELETE; no RETURNING), then,
    with ``read``, a SELECT of one row, returned (None without ``read``).

    On PostgreSQL in one statement (data-modifying CTEs, then the last write or the
    read), so one round trip; elsewhere one statement each, in the same order. In one
    statement everything sees the same snapshot: the writes must not depend on each
    other's effects nor change the same row, and the read does not see them (it sees
    the transaction's earlier statements). A locking read (``FOR ... UPDATE``) stays one."""
    if not parts and read is None:
        return None
    with connection.cursor() as cur:
        if connection.vendor != "postgresql" or len(parts) + (read is not None) == 1:
            for sql, params in parts:
                cur.execute(sql, params)
            if read is None:
                return None
            cur.execute(*read)
            return cur.fetchone()
        *ctes, last = [*parts, read] if read is not None else parts
        sql = "WITH " + ", ".join(f"w{n} AS ({text})" for n, (text, _) in enumerate(ctes)) + " " + last[0]
        cur.execute(sql, [p for _, params in ctes for p in params] + list(last[1]))
        return cur.fetchone() if read is not None else None


# Longer key lists go as one parameter: with server-side binding a PostgreSQL statement
# carries at most 65,535 parameters (apps.core.postgresql), SQLite's at most 32,766, and
# a whole org's due SLA escalations can name more issues than that.
ARRAY_PAST = 1000


def marks(model, pks) -> tuple[str, list]:
    """What goes inside ``pk IN (...)`` and its parameters: ``%s, %s, ...`` and the
    prepared primary keys, or past ``ARRAY_PAST`` keys one parameter (an array on
    PostgreSQL, a JSON array on SQLite) turned into rows."""
    pk = model._meta.pk
    values = [pk.get_db_prep_value(v, connection) for v in pks]
    if len(values) <= ARRAY_PAST:
        return ", ".join(["%s"] * len(values)), values
    if connection.vendor == "postgresql":
        return f"SELECT unnest(%s::{pk.db_type(connection)}[])", [values]
    return "SELECT value FROM json_each(%s)", [json.dumps(values)]


def select_for_update(model, pk, names: list[str], *, writes: list[tuple[str, list]] = ()) -> tuple | None:
    """Read ``names`` of one row, locked for update (``FOR NO KEY UPDATE`` on PostgreSQL;
    SQLite's write transaction already excludes other writers). Values come back as the
    driver returns them: use it for integers and text only. ``writes`` are sent first,
    in the same round trip (``run``)."""
    fields = _fields(model, names)
    pk_field = model._meta.pk
    sql = f"SELECT {', '.join(_q(f.column) for f in fields)} FROM {_q(model._meta.db_table)} WHERE {_q(pk_field.column)} = %s"
    if connection.vendor == "postgresql":
        sql += " FOR NO KEY UPDATE"
    return run(list(writes), read=(sql, [pk_field.get_db_prep_value(pk, connection)]))


# --- reading whole rows into model instances ------------------------------------------

_converters: dict = {}


_column_lists: dict = {}


def columns(model, alias: str) -> str:
    """``alias.col, ...`` for every concrete field of ``model``, in ``load`` order."""
    key = (model, alias, connection.vendor)
    if key not in _column_lists:
        _column_lists[key] = ", ".join(f"{alias}.{_q(f.column)}" for f in model._meta.concrete_fields)
    return _column_lists[key]


def width(model) -> int:
    return len(model._meta.concrete_fields)


def converter(model, names: list[str]):
    """A function turning a raw row of the columns ``names`` of ``model`` into the
    values the ORM would give (``values_list``): UUIDs, datetimes, booleans."""
    plan = []
    for name in names:
        field = model._meta.get_field(name)
        col = field.get_col(model._meta.db_table)
        plan.append((col, connection.ops.get_db_converters(col) + field.get_db_converters(connection)))

    def convert(row):
        out = []
        for value, (col, funcs) in zip(row, plan, strict=True):
            for func in funcs:
                value = func(value, col, connection)
            out.append(value)
        return tuple(out)

    return convert


def load(model, values):
    """An instance of ``model`` from the raw values of ``columns(model, ...)``, each
    converted as the ORM converts it (backend and field converters), marked as loaded."""
    fields = model._meta.concrete_fields
    cached = _converters.get((model, connection.vendor))
    if cached is None:
        cached = []
        for field in fields:
            col = field.get_col(model._meta.db_table)
            funcs = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
            cached.append((col, funcs))
        _converters[(model, connection.vendor)] = cached
    converted = []
    for value, (col, funcs) in zip(values, cached, strict=True):
        for func in funcs:
            value = func(value, col, connection)
        converted.append(value)
    return model.from_db(connection.alias, [f.attname for f in fields], converted)
